import JSON

/// The endpoints a provider's discovery document names (OpenID Connect Discovery 1.0, RFC 8414).
/// URLs are kept exactly as the document gives them.
public struct ProviderMetadata: Sendable, Equatable {
    /// The issuer identifier, or for Entra's multi-tenant authorities (`common`, `organizations`,
    /// `consumers`) its template, `https://login.microsoftonline.com/{tenantid}/v2.0`.
    public var issuer: String
    public var tokenEndpoint: String
    public var authorizationEndpoint: String?
    public var jwksURI: String?
    public var userinfoEndpoint: String?
    /// RFC 7009; absent when the provider offers no revocation.
    public var revocationEndpoint: String?
    /// RP-initiated logout; absent when the provider offers none.
    public var endSessionEndpoint: String?
    /// RFC 8628's device authorization endpoint; absent when the provider offers none.
    public var deviceAuthorizationEndpoint: String?
    /// CIBA's backchannel authentication endpoint; absent when the provider offers none.
    public var backchannelAuthenticationEndpoint: String?
    /// CIBA's `backchannel_token_delivery_modes_supported`; nil when not said.
    public var backchannelTokenDeliveryModes: [String]?
    /// OpenID Connect Native SSO (`native_sso_supported`): sign-ins may ask for a device secret.
    public var nativeSSOSupported = false
    /// The grant types the token endpoint takes (`grant_types_supported`); nil when not said.
    public var grantTypesSupported: [String]?

    /// RFC 8693's grant type.
    public static let tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"

    /// Whether the token endpoint may take the resource-owner password grant: listed, or the
    /// document does not list its grant types (Entra's does not), so only a try tells.
    public var mayOfferPasswordGrant: Bool { grantTypesSupported?.contains("password") ?? true }

    /// Whether the provider may offer Entra's native authentication: its endpoints are in no
    /// discovery document, but its email code is a grant of the token endpoint (`oob`, then
    /// `continuation_token`), so a document that lists its grant types without them rules it out.
    /// Only a document without the list (Entra's) leaves a try to tell.
    public var mayOfferNativeAuthentication: Bool {
        grantTypesSupported.map { $0.contains("oob") || $0.contains("continuation_token") } ?? true
    }

    /// Whether the provider offers CIBA in the poll mode, the only one a broker without a public
    /// address can take: its endpoint, and the mode listed (or no modes said, which CIBA requires
    /// but some providers leave out).
    public var offersCIBAPollMode: Bool {
        backchannelAuthenticationEndpoint != nil && (backchannelTokenDeliveryModes?.contains("poll") ?? true)
    }

    /// Whether the token endpoint takes RFC 8693 token exchange.
    public var offersTokenExchange: Bool { grantTypesSupported?.contains(Self.tokenExchangeGrant) ?? false }

    /// The issuer of tokens from `tenant` when ``issuer`` is a multi-tenant template; nil otherwise.
    public func issuer(ofTenant tenant: String) -> String? {
        guard let (prefix, suffix) = Self.templateParts(issuer) else { return nil }
        return prefix + tenant + suffix
    }

    /// The placeholder Entra's multi-tenant authorities put in their issuer.
    static let tenantPlaceholder = "{tenantid}"
    /// The tenant segments of Entra's multi-tenant authorities.
    static let multiTenantSegments = ["common", "organizations", "consumers"]

    /// The text around the one `{tenantid}` of a template issuer.
    static func templateParts(_ issuer: String) -> (String, String)? {
        let parts = issuer.split(separator: tenantPlaceholder, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    /// Whether `issuer` is the template of the multi-tenant `authority`: `{tenantid}` standing
    /// where the authority has `common`, `organizations` or `consumers`.
    static func isTenantTemplate(_ issuer: String, of authority: Authority) -> Bool {
        guard let (prefix, suffix) = templateParts(issuer) else { return false }
        return multiTenantSegments.contains { prefix + $0 + suffix == authority.url }
    }

    /// Reads a discovery document, checking that it belongs to `authority` (its `issuer` must be
    /// the authority, section 4.3, or, for Entra's multi-tenant authorities, the `{tenantid}`
    /// template of it) and that every endpoint is HTTPS (or loopback HTTP).
    public static func parse(_ bytes: [UInt8], for authority: Authority) throws(IdentityError) -> ProviderMetadata {
        let document = try JSONValue.providerObject(bytes, what: "the discovery document")
        guard let issuer = document["issuer"]?.string else {
            throw IdentityError.badResponse("the discovery document has no issuer")
        }
        var normalizedIssuer = issuer
        while normalizedIssuer.hasSuffix("/") { normalizedIssuer.removeLast() }
        guard normalizedIssuer == authority.url || isTenantTemplate(normalizedIssuer, of: authority) else {
            throw IdentityError.notAnIssuer(
                "the authority \(authority.url) is not the issuer its discovery document names (\(issuer)); "
                    + "set the authority to the issuer")
        }
        guard let token = document["token_endpoint"]?.string else {
            throw IdentityError.badResponse("the discovery document has no token_endpoint")
        }
        func endpoint(_ key: String) throws(IdentityError) -> String? {
            guard let value = document[key]?.string else { return nil }
            _ = try Authority.checkedHost(of: value)
            return value
        }
        _ = try Authority.checkedHost(of: token)
        var metadata = ProviderMetadata(
            issuer: issuer, tokenEndpoint: token,
            authorizationEndpoint: try endpoint("authorization_endpoint"),
            jwksURI: try endpoint("jwks_uri"),
            userinfoEndpoint: try endpoint("userinfo_endpoint"),
            revocationEndpoint: try endpoint("revocation_endpoint"),
            endSessionEndpoint: try endpoint("end_session_endpoint"))
        metadata.deviceAuthorizationEndpoint = try endpoint("device_authorization_endpoint")
        metadata.backchannelAuthenticationEndpoint = try endpoint("backchannel_authentication_endpoint")
        metadata.backchannelTokenDeliveryModes =
            document["backchannel_token_delivery_modes_supported"]?.array?.compactMap(\.string)
        metadata.nativeSSOSupported = document["native_sso_supported"] == .bool(true)
        metadata.grantTypesSupported = document["grant_types_supported"]?.array?.compactMap(\.string)
        return metadata
    }
}
