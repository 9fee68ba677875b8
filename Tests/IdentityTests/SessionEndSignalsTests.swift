import BrokerCore
import JSON
import Testing

@testable import Identity

/// What the Identity layer reads as "the session ended" and what as "the person must act", and
/// how a security event's subject is read: no network.
@Suite struct SessionEndSignalsTests {
    private func refusal(_ suberror: String? = nil, codes: [Int] = []) -> BrokerFailure {
        IdentityError.oauth(status: 400, error: "invalid_grant", description: "x", codes: codes, suberror: suberror)
            .brokerFailure(during: .refresh)
    }

    @Test func onlyARefusalOfTheGrantSaysTheSessionEnded() {
        #expect(refusal().grantEnded)
        #expect(refusal(codes: [70008]).grantEnded)
        #expect(!refusal("basic_action").grantEnded)
        #expect(!refusal("consent_required").grantEnded)
        #expect(!refusal(codes: [50076]).grantEnded)
        #expect(!refusal(codes: [53000]).grantEnded)
        #expect(
            IdentityError.oauth(status: 400, error: "interaction_required", description: "", codes: [], suberror: nil)
                .brokerFailure(during: .refresh).grantEnded == false)
    }

    @Test func subjectsOfAnotherIssuerNameNobodyHere() {
        let issuer = "https://login.example/t/v2.0"
        func subject(_ json: JSONValue) -> EventSubject { SecurityEventVerifier.subject(json, issuers: [issuer]) }
        let own = subject(.object(["format": .string("iss_sub"), "iss": .string(issuer), "sub": .string("oid-1")]))
        #expect(own.userIds == ["oid-1"])
        let foreign = subject(
            .object(["format": .string("iss_sub"), "iss": .string("https://evil.example"), "sub": .string("oid-1")]))
        #expect(foreign.userIds.isEmpty)
        #expect(subject(.object(["format": .string("opaque"), "id": .string("oid-1")])).userIds.isEmpty)
        let complex = subject(
            .object([
                "format": .string("complex"),
                "user": .object(["format": .string("email"), "email": .string("a@b.example")]),
                "tenant": .object(["format": .string("opaque"), "id": .string("t")]),
            ]))
        #expect(complex.emails == ["a@b.example"] && complex.tenant == "t")
        #expect(SharedSignalsReceiver.sameIssuer(issuer + "/", issuer))
        #expect(!SharedSignalsReceiver.sameIssuer("", ""))
    }

    @Test func theMetadataGoesBetweenTheHostAndThePath() throws {
        let settings = SharedSignalsSettings(
            transmitter: try Authority("https://ssf.example:8443/tenant/v2.0"), clientId: "c",
            clientSecret: ClientSecret(secret: "s"), deviceId: "d")
        #expect(settings.metadataURL == "https://ssf.example:8443/.well-known/ssf-configuration/tenant/v2.0")
        let bare = SharedSignalsSettings(
            transmitter: try Authority("https://ssf.example"), clientId: "c", clientSecret: ClientSecret(secret: "s"),
            deviceId: "d")
        #expect(bare.metadataURL == "https://ssf.example/.well-known/ssf-configuration")
    }
}
