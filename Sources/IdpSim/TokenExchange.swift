import Foundation
import JWTKit

/// `grant_type=urn:ietf:params:oauth:grant-type:token-exchange` at the token endpoint, in its two
/// forms, told apart by the actor token:
///
/// - OpenID Connect Native SSO for Mobile Apps 1.0 (draft 07, section 4): the subject is an ID
///   token of a device session, the actor its device secret (`actor_token_type`
///   `urn:openid:params:token-type:device-secret`).
/// - OAuth 2.0 Token Exchange (RFC 8693) without an actor: the subject is an access token or a
///   refresh token this provider issued.
///
/// Either way the answer holds tokens issued to the requesting client, for the scopes it asks.
struct TokenExchange: Sendable {
    static let grantType = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"
    static let refreshTokenType = "urn:ietf:params:oauth:token-type:refresh_token"
    static let idTokenType = "urn:ietf:params:oauth:token-type:id_token"
    static let deviceSecretType = "urn:openid:params:token-type:device-secret"

    let provider: Provider

    /// Whether the token endpoint takes the grant type at all.
    static func offered(by provider: Provider) -> Bool {
        provider.offers(.nativeSSO) || provider.offers(.tokenExchange)
    }

    func grant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        guard let subject = parameters.nonEmpty("subject_token") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'subject_token'.")
        }
        guard let subjectType = parameters.nonEmpty("subject_token_type") else {
            throw OAuthError.invalidRequest(
                "The request body must contain the following parameter: 'subject_token_type'.")
        }
        if let requested = parameters.nonEmpty("requested_token_type"), requested != Self.accessTokenType {
            throw OAuthError.invalidRequest(
                "Only access tokens can be requested (requested_token_type \(Self.accessTokenType)).")
        }
        if let audience = parameters.nonEmpty("audience"), audience != provider.endpoints.issuer,
            audience != TokenIssuer.apiAudience
        {
            throw OAuthError(
                status: .badRequest, error: "invalid_target",
                description: "The audience '\(audience)' is not a service of this provider.", codes: [500011])
        }
        let actorType = parameters.nonEmpty("actor_token_type")
        if actorType == nil, parameters.nonEmpty("actor_token") != nil {
            throw OAuthError.invalidRequest("An actor_token needs its actor_token_type.")
        }
        switch actorType {
        case Self.deviceSecretType?:
            guard provider.offers(.nativeSSO) else {
                throw OAuthError.invalidRequest("Native SSO is not offered by this provider.", code: 70003)
            }
            return try await nativeSSO(subject: subject, subjectType: subjectType, parameters, client: client)
        case nil:
            guard provider.offers(.tokenExchange) else {
                throw OAuthError(
                    status: .badRequest, error: "unsupported_grant_type",
                    description: "Token exchange is offered for Native SSO only (with a device secret).", codes: [70003]
                )
            }
            return try await exchange(subject: subject, subjectType: subjectType, parameters, client: client)
        case let other?:
            throw OAuthError.invalidRequest("The actor_token_type '\(other)' is not supported.")
        }
    }

    // MARK: Native SSO

    /// The ID token as Native SSO presents it: signed by this provider, its expiry not checked
    /// (the device session's life decides, section 4.3).
    // Field names are the JSON's own (snake_case), so that Codable needs no key table.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    private struct SessionIDToken: JWTPayload {
        var iss: String
        var oid: String
        var sid: String?
        var ds_hash: String?
        func verify(using _: some JWTAlgorithm) async throws {}
    }

    /// Native SSO 4.3's checks, in order: the device secret, the ID token, their binding
    /// (`ds_hash`), the session (`sid`), the client's permission; each failure is `invalid_grant`
    /// but the last (`unauthorized_client`).
    private func nativeSSO(
        subject: String, subjectType: String, _ parameters: [String: String],
        client: ClientRegistration
    ) async throws -> SignIn {
        guard subjectType == Self.idTokenType else {
            throw OAuthError.invalidRequest("Native SSO's subject_token_type is \(Self.idTokenType).")
        }
        guard let secret = parameters.nonEmpty("actor_token") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'actor_token'.")
        }
        let session: DeviceSecretStore.Session
        switch await provider.deviceSecrets.lookup(secret) {
        case .live(let found): session = found
        case .unknown: throw OAuthError.invalidGrant("The device secret is not valid.", code: 9_002_313)
        case .expired: throw OAuthError.invalidGrant("The device secret has expired.", code: 700082)
        case .revoked: throw OAuthError.invalidGrant("The device secret has been revoked.", code: 50173)
        }
        let idToken: SessionIDToken
        do {
            idToken = try await provider.keys.verify(subject, as: SessionIDToken.self)
        } catch {
            throw OAuthError.invalidGrant("The subject token is not an ID token this provider issued.", code: 50027)
        }
        guard idToken.iss == provider.endpoints.issuer else {
            throw OAuthError.invalidGrant("The subject token was issued by another provider.", code: 50027)
        }
        guard idToken.ds_hash == TokenIssuer.deviceSecretHash(secret) else {
            throw OAuthError.invalidGrant("The ID token is not bound to this device secret (ds_hash).", code: 50027)
        }
        guard let sid = idToken.sid, sid == session.sid, await provider.deviceSecrets.isLive(sid: sid) else {
            throw OAuthError.invalidGrant("The session of the ID token has ended.", code: 50173)
        }
        guard let user = provider.users.user(objectId: idToken.oid),
            user.username.lowercased() == session.username.lowercased()
        else {
            throw OAuthError.invalidGrant("The user of the ID token no longer exists.", code: 50034)
        }
        try permitSingleSignOn(client)
        await provider.stats.countExchange("native-sso")
        return SignIn(
            user: user, client: client, scopes: TokenIssuer.scopes(from: parameters["scope"], client: client),
            nonce: nil,
            authTime: Date(), deviceSession: DeviceSession(secret: secret, sid: sid, handOutSecret: false),
            isExchange: true)
    }

    // MARK: RFC 8693

    private func exchange(
        subject: String, subjectType: String, _ parameters: [String: String],
        client: ClientRegistration
    ) async throws -> SignIn {
        let user: UserAccount?
        switch subjectType {
        case Self.accessTokenType:
            let claims: AccessTokenClaims
            do {
                claims = try await provider.keys.verify(subject, as: AccessTokenClaims.self)
            } catch {
                throw OAuthError.invalidGrant(
                    "The subject token is not a valid access token of this provider, or it has expired.", code: 50027)
            }
            guard claims.iss == provider.endpoints.issuer(forTenant: claims.tid), claims.aud == TokenIssuer.apiAudience
            else {
                throw OAuthError.invalidGrant("The subject token was not issued by this provider.", code: 50027)
            }
            user = provider.users.user(objectId: claims.oid)
        case Self.refreshTokenType:
            guard let grant = await provider.refreshTokens.inspect(subject) else {
                throw OAuthError.invalidGrant("The subject token is not a valid refresh token.", code: 9_002_313)
            }
            user = provider.users.user(named: grant.username)
        default:
            throw OAuthError.invalidRequest(
                "The subject_token_type '\(subjectType)' is not supported; use an access or refresh token.")
        }
        guard let user else {
            throw OAuthError.invalidGrant("The user of the subject token no longer exists.", code: 50034)
        }
        try permitSingleSignOn(client)
        await provider.stats.countExchange("token-exchange")
        return SignIn(
            user: user, client: client, scopes: TokenIssuer.scopes(from: parameters["scope"], client: client),
            nonce: nil,
            authTime: Date(), isExchange: true)
    }

    /// The administrator's switch per application (`singleSignOn: false` in the users file). No
    /// AADSTS700016 here: that code says the application is not registered at all, and this one is.
    func permitSingleSignOn(_ client: ClientRegistration) throws {
        guard client.singleSignOn else {
            throw OAuthError(
                status: .badRequest, error: "unauthorized_client",
                description: "The application '\(client.clientId)' may not use single sign-on.")
        }
    }
}
