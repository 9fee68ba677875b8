import BrokerCore
import Crypto
import HTTP
import JSON

/// The provider's single sign-on mechanisms, as the token endpoint speaks them:
///
/// - OpenID Connect Native SSO for Mobile Apps 1.0 (draft 07): a sign-in asks for the
///   `device_sso` scope; the answer carries a `device_secret`, bound to its ID token by the
///   `ds_hash` claim; another app presents both in a token exchange (section 4).
/// - Family refresh tokens (Entra's "family of client ids"): a token response with `foci` holds
///   a refresh token that the other clients of the family may redeem with a refresh grant.
/// - OAuth 2.0 Token Exchange (RFC 8693): the other app, authenticated as itself, presents the
///   signing-in app's token as the subject token.
extension OIDCProvider {
    static let tokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
    static let tokenTypeRefreshToken = "urn:ietf:params:oauth:token-type:refresh_token"
    static let tokenTypeIDToken = "urn:ietf:params:oauth:token-type:id_token"
    /// Native SSO's `actor_token_type` for the device secret.
    static let tokenTypeDeviceSecret = "urn:openid:params:token-type:device-secret"
    /// The scope that asks a sign-in for a device secret.
    static let deviceSSOScope = "device_sso"

    /// Native SSO where discovery advertises it; RFC 8693 where the token endpoint takes the
    /// grant type and Native SSO is not advertised (Native SSO is a profile of the same grant,
    /// so a provider that lists the grant for it alone does not take every exchange).
    public func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism> {
        let endpoints = try await requester.withBudget { () async throws(BrokerFailure) -> ProviderMetadata in
            try await self.endpoints(for: .other)
        }
        return Self.singleSignOn(advertisedBy: endpoints)
    }

    public var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? {
        metadata.latest.withLock { $0 }.map(Self.singleSignOn(advertisedBy:))
    }

    static func singleSignOn(advertisedBy endpoints: ProviderMetadata) -> Set<SingleSignOnMechanism> {
        if endpoints.nativeSSOSupported { return [.nativeSSO] }
        return endpoints.offersTokenExchange ? [.tokenExchange] : []
    }

    /// Native SSO section 4.2: the ID token as subject, the device secret as actor, the
    /// provider's issuer as audience.
    public func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    {
        try await requester.withBudget { () async throws(BrokerFailure) -> ProviderTokens in
            let endpoints = try await endpoints(for: .deviceSecretExchange)
            return try await grant(
                .deviceSecretExchange, clientId: clientId, scopes: scopes,
                fields: [
                    ("grant_type", ProviderMetadata.tokenExchangeGrant), ("audience", endpoints.issuer),
                    ("subject_token", deviceSecret.idToken), ("subject_token_type", Self.tokenTypeIDToken),
                    ("actor_token", deviceSecret.secret), ("actor_token_type", Self.tokenTypeDeviceSecret),
                ])
        }
    }

    /// A refresh grant for `clientId` with a refresh token another client of its family holds.
    public func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws
        -> ProviderTokens
    {
        try await requester.withBudget { () async throws(BrokerFailure) -> ProviderTokens in
            try await grant(
                .familyRefresh, clientId: clientId, scopes: scopes,
                fields: [
                    ("grant_type", "refresh_token"), ("refresh_token", refreshToken),
                ])
        }
    }

    /// RFC 8693 section 2.1, asking for an access token (with the ID and refresh tokens the
    /// scopes ask for, where the provider issues them).
    public func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens {
        let (token, type) =
            switch subject {
            case .accessToken(let value): (value, Self.tokenTypeAccessToken)
            case .refreshToken(let value): (value, Self.tokenTypeRefreshToken)
            }
        return try await requester.withBudget { () async throws(BrokerFailure) -> ProviderTokens in
            try await grant(
                .tokenExchange, clientId: clientId, scopes: scopes,
                fields: [
                    ("grant_type", ProviderMetadata.tokenExchangeGrant),
                    ("subject_token", token), ("subject_token_type", type),
                    ("requested_token_type", Self.tokenTypeAccessToken),
                ])
        }
    }

    /// The `scope` parameter of a request: a person's sign-in also asks for Native SSO's device
    /// secret where the provider offers it (it needs `openid`, which every request carries).
    static func scopeParameter(_ scopes: Scopes, kind: GrantKind, endpoints: ProviderMetadata) -> String {
        guard kind.isSignIn, endpoints.nativeSSOSupported, scopes.values.contains("openid") else {
            return scopes.joined
        }
        return scopes.joined + " " + deviceSSOScope
    }

    /// The answer's device secret, kept only when the ID token's `ds_hash` binds it to that
    /// token (Native SSO 3.4.1): the pair is what a later exchange presents, and a secret the
    /// ID token does not vouch for would only be refused then.
    func deviceSecret(in body: JSONValue, boundTo claims: IdentityClaims, clientId: String) -> String? {
        guard let secret = body["device_secret"]?.string, !secret.isEmpty else { return nil }
        guard body["id_token"]?.string != nil, let dsHash = claims.claims["ds_hash"]?.string else {
            logger.warning(
                "the provider issued a device secret without an ID token whose ds_hash binds it; unused",
                metadata: ["clientId": "\(clientId)"])
            return nil
        }
        guard dsHash == Self.deviceSecretHash(secret) else {
            logger.warning(
                "the ID token's ds_hash does not match the device secret; single sign-on will not use it",
                metadata: ["clientId": "\(clientId)"])
            return nil
        }
        return secret
    }

    /// `ds_hash`: the left half of the SHA-256 of the secret's ASCII octets, base64url. The
    /// broker accepts ID tokens signed with ES256 and RS256 only, both of which hash with SHA-256.
    static func deviceSecretHash(_ secret: String) -> String {
        Base64URL.encode(Array(SHA256.hash(data: Array(secret.utf8)).prefix(16)))
    }

    /// Entra's `foci`: the family the answer's refresh token belongs to (a string, "1" today),
    /// kept in the state file: it meets the outside-text rule here.
    static func family(in body: JSONValue) -> String? {
        switch body["foci"] {
        case .string(let value)? where !value.isEmpty: return OutsideText.cleaned(value)
        case .number(let value)? where value.isFinite && value == value.rounded() && abs(value) < 1e9:
            return String(Int(value))
        default: return nil
        }
    }
}
