import Hummingbird

/// `POST {authority}/oauth2/v2.0/revoke` (RFC 7009). Refresh tokens are revoked with their family,
/// Native SSO's device secrets with their session (whatever the `token_type_hint`: §2.1 lets the
/// server look a token up by itself); access tokens are self-contained JWTs and cannot be revoked,
/// which RFC 7009 §2.2 permits.
struct RevocationRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        router.post(provider.endpoints.route(Endpoints.revokePath)) { request, _ in
            await provider.stats.count("revoke")
            let (fault, replacement) = await FaultResponses.before(.revoke, provider: provider)
            if let replacement { return replacement }
            if provider.settings.refusesRevocation { return Response(status: .unauthorized) }
            let parameters = try await request.formParameters()
            guard let token = parameters.nonEmpty("token") else {
                throw OAuthError.invalidRequest("The request body must contain the following parameter: 'token'.")
            }
            // Public clients identify themselves with client_id only; confidential ones must authenticate (§2.1).
            var clientId: String?
            if parameters["client_id"] != nil || request.headers[.authorization] != nil {
                clientId = try ClientAuthenticator(users: provider.users).authenticate(request, parameters).clientId
            }
            if await !provider.deviceSecrets.revoke(token) {
                await provider.refreshTokens.revoke(token, clientId: clientId)
            }
            provider.logger.info(
                "revocation request handled", metadata: ["hint": "\(parameters["token_type_hint"] ?? "none")"])
            // §2.2: 200 whether or not the token was known.
            return FaultResponses.after(fault, Response(status: .ok, headers: [.cacheControl: "no-store"]))
        }
    }
}
