import Foundation
import Hummingbird
import Logging

/// `POST {authority}/oauth2/v2.0/token` (RFC 6749 §3.2): password, refresh_token, authorization_code,
/// Entra native authentication's `oob` / `password`+`continuation_token` grants, and token exchange
/// (Native SSO's and RFC 8693's, ``TokenExchange``).
struct TokenRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        router.post(provider.endpoints.route(Endpoints.tokenPath)) { request, _ in
            try await handle(request)
        }
    }

    func handle(_ request: Request) async throws -> Response {
        let parameters = try await request.formParameters()
        let grantType = parameters["grant_type"] ?? ""
        await provider.stats.countToken(grantType: grantType.isEmpty ? "(missing)" : grantType)
        let (fault, replacement) = await FaultResponses.before(.token, provider: provider)
        if let replacement { return replacement }

        let client = try ClientAuthenticator(users: provider.users).authenticate(request, parameters)
        let claims = try await claimsParameter(parameters, client: client)
        for username in await namedUsers(parameters) { try await refuseDisabledAccount(username) }
        var signIn: SignIn
        switch grantType {
        case "password":
            if parameters["continuation_token"] != nil {
                signIn = try await NativeAuthRoutes(provider: provider).passwordGrant(parameters, client: client)
            } else {
                signIn = try passwordGrant(parameters, client: client)
            }
        case "refresh_token":
            signIn = try await refreshGrant(parameters, client: client)
        case "authorization_code":
            signIn = try await AuthorizeRoutes(provider: provider).codeGrant(parameters, client: client)
        case "oob":
            signIn = try await NativeAuthRoutes(provider: provider).oobGrant(parameters, client: client)
        case "client_credentials":
            return FaultResponses.after(
                fault,
                try await clientCredentialsGrant(parameters, client: client, capabilities: claims?.capabilities ?? []))
        case DeviceAuthorization.grantType where provider.offers(.deviceCode):
            signIn = try await DeviceAuthorization(provider: provider).grant(parameters, client: client)
        case BackchannelAuthentication.grantType where provider.offers(.ciba):
            signIn = try await BackchannelAuthentication(provider: provider).grant(parameters, client: client)
        case TokenExchange.grantType where TokenExchange.offered(by: provider):
            signIn = try await TokenExchange(provider: provider).grant(parameters, client: client)
        case "":
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'grant_type'.")
        default:
            throw OAuthError(
                status: .badRequest, error: "unsupported_grant_type",
                description: "The provided value for the input parameter 'grant_type' is not valid.", codes: [70003])
        }
        try await refuseDisabledAccount(signIn.user.username)
        signIn.capabilities = claims?.capabilities ?? []
        // Native SSO §3.1: a person's sign-in granted `device_sso` (with `openid`) starts a device session.
        let personal = [
            "password", "authorization_code", "oob", DeviceAuthorization.grantType, BackchannelAuthentication.grantType,
        ]
        if personal.contains(grantType),
            provider.offers(.nativeSSO),
            signIn.scopes.contains("openid"), signIn.scopes.contains("device_sso")
        {
            let (secret, sid) = await provider.deviceSecrets.issue(
                username: signIn.user.username, clientId: client.clientId)
            signIn.deviceSession = DeviceSession(secret: secret, sid: sid, handOutSecret: true)
        }
        let tokens = try await provider.issuer.issue(signIn, forging: fault.mode.forgery)
        provider.logger.info(
            "issued tokens",
            metadata: ["grant": "\(grantType)", "client": "\(client.clientId)", "user": "\(signIn.user.username)"])
        return FaultResponses.after(fault, JSONBody.response(encoding: tokens, headers: .noStore))
    }

    /// Client credentials (RFC 6749 §4.4): only a client that authenticated with its secret may
    /// act as itself. Its token is for the Shared Signals transmitter when the scope names it,
    /// else for the API, as Entra's `RESOURCE/.default` scope chooses the resource.
    private func clientCredentialsGrant(
        _ parameters: [String: String], client: ClientRegistration, capabilities: [String]
    ) async throws -> Response {
        guard client.isConfidential else {
            throw OAuthError(
                status: .badRequest, error: "unauthorized_client",
                description:
                    "The client credentials grant is for confidential clients; '\(client.clientId)' is public.",
                codes: [700025])
        }
        let scopes = (parameters["scope"] ?? "").split(separator: " ")
        let audience =
            scopes.contains { $0.hasPrefix(TokenIssuer.sharedSignalsAudience) }
            ? TokenIssuer.sharedSignalsAudience : TokenIssuer.apiAudience
        let tokens = try await provider.issuer.issueApp(client, audience: audience, capabilities: capabilities)
        provider.logger.info(
            "issued tokens", metadata: ["grant": "client_credentials", "client": "\(client.clientId)"])
        return JSONBody.response(encoding: tokens, headers: .noStore)
    }

    /// The `claims` parameter (OIDC Core §5.5) of any grant, under Continuous Access Evaluation;
    /// without it the parameter is ignored, as by a provider that knows nothing of it. Claims are
    /// not secret, so the capabilities they declare are logged.
    private func claimsParameter(_ parameters: [String: String], client: ClientRegistration) async throws
        -> ContinuousAccess.Request?
    {
        guard provider.offers(.cae), let text = parameters.nonEmpty("claims") else { return nil }
        await provider.stats.count("claims")
        let request = try ContinuousAccess.parse(text)
        await provider.claimsRequests.record(text, clientId: client.clientId)
        provider.logger.info(
            "claims requested",
            metadata: ["client": "\(client.clientId)", "xms_cc": "\(request.capabilities.joined(separator: " "))"])
        return request
    }

    /// The users a request names or whose tokens it presents, so that a disabled account is told
    /// so (and not that its revoked refresh token is revoked) before anything is looked at.
    private func namedUsers(_ parameters: [String: String]) async -> [String] {
        var users: [String] = []
        if parameters["continuation_token"] == nil, let username = parameters.nonEmpty("username") {
            users.append(username)
        }
        for name in ["refresh_token", "subject_token"] {
            if let token = parameters.nonEmpty(name), let owner = await provider.refreshTokens.owner(of: token) {
                users.append(owner)
            }
        }
        if let secret = parameters.nonEmpty("actor_token"), let owner = await provider.deviceSecrets.owner(of: secret) {
            users.append(owner)
        }
        return users
    }

    /// Entra's answer to every grant of a disabled account.
    func refuseDisabledAccount(_ username: String) async throws {
        guard await provider.revocations.isDisabled(username) else { return }
        throw OAuthError.invalidGrant("User account is disabled.", code: 50057)
    }

    /// Resource owner password credentials (RFC 6749 §4.3).
    private func passwordGrant(_ parameters: [String: String], client: ClientRegistration) throws -> SignIn {
        guard let username = parameters.nonEmpty("username") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'username'.")
        }
        guard let password = parameters["password"] else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'password'.")
        }
        guard let user = provider.users.user(named: username) else {
            throw OAuthError.invalidGrant(
                "The user account \(username) does not exist in the \(provider.users.tenantId) directory.", code: 50034)
        }
        guard user.supportsPassword, let expected = user.password,
            ClientAuthenticator.constantTimeEqual(expected, password)
        else {
            throw OAuthError.invalidGrant(
                "Error validating credentials due to invalid username or password.", code: 50126)
        }
        return SignIn(
            user: user, client: client, scopes: TokenIssuer.scopes(from: parameters["scope"], client: client),
            nonce: parameters["nonce"], authTime: Date())
    }

    /// Refresh with rotation (RFC 6749 §6); a narrower `scope` is allowed, a wider one is not.
    private func refreshGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        guard let token = parameters.nonEmpty("refresh_token") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'refresh_token'.")
        }
        let grant: RefreshTokenStore.Grant
        let asked = parameters.nonEmpty("scope").map { TokenIssuer.scopes(from: $0, client: client) }
        switch await provider.refreshTokens.redeem(token, clientId: client.clientId, scopes: asked) {
        case .valid(let found):
            grant = found
        case .scopeNotGranted(let extra):
            throw OAuthError(
                status: .badRequest, error: "invalid_scope",
                description: "The scope '\(extra)' was not part of the original grant.", codes: [70011])
        case .unknown:
            throw OAuthError.invalidGrant("The provided value for the refresh token is not valid.", code: 9_002_313)
        case .expired:
            throw OAuthError.invalidGrant("The refresh token has expired due to inactivity.", code: 700082)
        case .revoked:
            throw OAuthError.invalidGrant("The refresh token has been revoked.", code: 50173)
        case .reused:
            provider.logger.warning(
                "refresh token reuse detected; family revoked", metadata: ["client": "\(client.clientId)"])
            throw OAuthError.invalidGrant(
                "The refresh token was already used; all tokens of this grant are revoked.", code: 50173)
        case .wrongClient(let issued):
            return try await familyGrant(issued, parameters, client: client)
        }
        guard let user = provider.users.user(named: grant.username) else {
            throw OAuthError.invalidGrant("The user account no longer exists.", code: 50034)
        }
        let scopes = asked ?? grant.scopes
        return SignIn(
            user: user, client: client, scopes: scopes, nonce: nil, authTime: grant.authTime,
            refreshFamily: grant.family)
    }

    /// A refresh token of another client, redeemed as a family refresh token: both clients are in
    /// one family (and family tokens are on). Like Entra, the presented token is not consumed;
    /// the new one joins its revocation family, so revoking that ends them all.
    private func familyGrant(
        _ issued: RefreshTokenStore.Grant, _ parameters: [String: String],
        client: ClientRegistration
    ) async throws -> SignIn {
        guard provider.offers(.familyTokens), let family = client.family,
            provider.users.client(issued.clientId)?.family == family
        else {
            throw OAuthError.invalidGrant("The refresh token was issued to a different client.", code: 70000)
        }
        try TokenExchange(provider: provider).permitSingleSignOn(client)
        guard let user = provider.users.user(named: issued.username) else {
            throw OAuthError.invalidGrant("The user account no longer exists.", code: 50034)
        }
        await provider.stats.countExchange("family-refresh")
        return SignIn(
            user: user, client: client, scopes: TokenIssuer.scopes(from: parameters["scope"], client: client),
            nonce: nil,
            authTime: issued.authTime, refreshFamily: issued.family)
    }
}
