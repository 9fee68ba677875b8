import Testing

@testable import Identity

/// The discovery document's issuer: the authority itself, or for Entra's multi-tenant authorities
/// (`common`, `organizations`, `consumers`) the `{tenantid}` template of it, and nothing else.
@Suite("Discovery: the issuer an authority may publish")
struct ProviderMetadataTests {
    static func document(issuer: String) -> [UInt8] {
        Array(
            #"{"issuer": "\#(issuer)", "token_endpoint": "https://login.example/common/oauth2/v2.0/token"}"#.utf8)
    }

    @Test(arguments: ["common", "organizations", "consumers"])
    func multiTenantAuthoritiesPublishATemplate(segment: String) throws {
        let authority = try Authority("https://login.example/\(segment)/v2.0")
        let metadata = try ProviderMetadata.parse(
            Self.document(issuer: "https://login.example/{tenantid}/v2.0"), for: authority)
        #expect(metadata.issuer(ofTenant: "t-1") == "https://login.example/t-1/v2.0")
    }

    @Test func anyOtherAuthorityMustBeItsOwnIssuer() throws {
        let tenant = try Authority("https://login.example/contoso/v2.0")
        #expect(throws: IdentityError.self) {
            try ProviderMetadata.parse(Self.document(issuer: "https://login.example/{tenantid}/v2.0"), for: tenant)
        }
        let exact = try ProviderMetadata.parse(Self.document(issuer: "https://login.example/contoso/v2.0"), for: tenant)
        #expect(exact.issuer(ofTenant: "other") == nil)
        // A template on another host, or with the placeholder twice, is no template of this authority.
        let common = try Authority("https://login.example/common/v2.0")
        for issuer in ["https://evil.example/{tenantid}/v2.0", "https://login.example/{tenantid}/{tenantid}/v2.0"] {
            #expect(throws: IdentityError.self) {
                try ProviderMetadata.parse(Self.document(issuer: issuer), for: common)
            }
        }
    }
}
