import Foundation
import Hummingbird

/// Bearer-protected resources: the Graph-like `GET /v1.0/me` and OIDC `GET {authority}/oidc/userinfo`.
struct ResourceRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        router.get(RouterPath(Endpoints.mePath)) { request, _ in
            await provider.stats.count("me")
            let (claims, user) = try await authorize(request, requiredScope: "User.Read", continuousAccess: true)
            var body: [String: Any] = [
                "id": claims.oid,
                "displayName": user.displayName,
                "userPrincipalName": user.username,
                "mail": user.email ?? NSNull(),
            ]
            body["@odata.context"] = provider.endpoints.baseURL + "/v1.0/$metadata#users/$entity"
            return JSONBody.response(body)
        }
        router.get(provider.endpoints.route(Endpoints.userinfoPath)) { request, _ in
            await provider.stats.count("userinfo")
            let (fault, replacement) = await FaultResponses.before(.userinfo, provider: provider)
            if let replacement { return replacement }
            let (claims, user) = try await authorize(request, requiredScope: "openid")
            var body: [String: Any] = [
                "sub": claims.sub, "name": user.displayName, "preferred_username": user.username, "oid": claims.oid,
            ]
            if let email = user.email { body["email"] = email }
            return FaultResponses.after(fault, JSONBody.response(body))
        }
    }

    /// Validates the access token (signature, `exp`/`nbf`, `iss`, `aud`) and the scope (RFC 6750 §3.1).
    /// With `continuousAccess` (the Graph-like API, under CAE), a disabled user's token is refused,
    /// and so is a token of a client that declared `cp1` issued before the user's last revocation,
    /// with a claims challenge; other tokens are honoured until they expire, as Entra does.
    private func authorize(_ request: Request, requiredScope: String, continuousAccess: Bool = false) async throws -> (
        AccessTokenClaims, UserAccount
    ) {
        guard let token = request.bearerToken else {
            throw Self.challenge(error: nil, description: "No access token was presented.")
        }
        let claims: AccessTokenClaims
        do {
            claims = try await provider.keys.verify(token, as: AccessTokenClaims.self)
        } catch {
            throw Self.challenge(error: "invalid_token", description: "The access token is invalid or expired.")
        }
        guard claims.iss == provider.endpoints.issuer(forTenant: claims.tid), claims.aud == TokenIssuer.apiAudience
        else {
            throw Self.challenge(
                error: "invalid_token", description: "The access token was not issued for this resource.")
        }
        guard claims.scopes.contains(requiredScope) else {
            throw Self.challenge(
                error: "insufficient_scope", description: "The access token lacks the \(requiredScope) scope.",
                status: .forbidden, scope: requiredScope)
        }
        guard let user = provider.users.user(objectId: claims.oid) else {
            throw Self.challenge(error: "invalid_token", description: "The user of this token no longer exists.")
        }
        if continuousAccess, provider.offers(.cae) {
            if await provider.revocations.isDisabled(user.username) {
                throw Self.challenge(error: "invalid_token", description: "The user account is disabled.")
            }
            if claims.xms_cc?.contains("cp1") == true,
                let revokedAt = await provider.revocations.revocation(
                    before: claims.uti, issuedAt: claims.iat.value, username: user.username)
            {
                throw ContinuousAccess.challenge(
                    authorizationURI: provider.endpoints.url(Endpoints.authorizePath), revokedAt: revokedAt)
            }
        }
        return (claims, user)
    }

    static func challenge(
        error: String?, description: String, status: HTTPResponse.Status = .unauthorized, scope: String? = nil
    ) -> OAuthError {
        var value = "Bearer realm=\"idp-sim\""
        if let error { value += ", error=\"\(error)\", error_description=\"\(description)\"" }
        if let scope { value += ", scope=\"\(scope)\"" }
        var oauthError = OAuthError(status: status, error: error ?? "invalid_request", description: description)
        oauthError.headers[.wwwAuthenticate] = value
        return oauthError
    }
}
