import BrokerCore

/// The password sign-in at the provider: native authentication's password path where the
/// provider offers it, the resource-owner password grant (RFC 6749 4.3) where the administrator
/// allows it.
extension OIDCProvider {
    /// Native authentication's password path where the provider offers it (remembered after
    /// the first try), the resource-owner password grant (RFC 6749 4.3) otherwise.
    public func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws
        -> ProviderTokens
    {
        try await requester.withBudget { () async throws(BrokerFailure) -> ProviderTokens in
            try await passwordSignIn(clientId: clientId, username: username, password: password, scopes: scopes)
        }
    }

    private func passwordSignIn(clientId: String, username: String, password: String, scopes: Scopes)
        async throws(BrokerFailure) -> ProviderTokens
    {
        // Discovery first: a wrong authority also has no native-authentication endpoints, and
        // would otherwise be reported as a provider that offers none (NotSupported).
        let endpoints = try await endpoints(for: .other)
        if endpoints.mayOfferNativeAuthentication, await nativeAuthentication.mayBeOffered {
            if let tokens = try await nativePasswordSignIn(
                clientId: clientId, username: username, password: password, scopes: scopes)
            {
                return tokens
            }
            await nativeAuthentication.markNotOffered()
            logger.info("the provider offers no native authentication")
        }
        guard allowPasswordGrant else { throw Self.passwordGrantNotAllowed }
        return try await grant(
            .signIn(.password), clientId: clientId, scopes: scopes,
            fields: [
                ("grant_type", "password"), ("username", username), ("password", password),
            ])
    }

    static let passwordGrantNotAllowed = BrokerFailure(
        .notSupported,
        "the identity provider offers no native authentication, and the resource-owner password grant, which "
            + "the OAuth 2.0 Security BCP (RFC 9700) deprecates, is not allowed here: sign in in the browser "
            + "(AcquireTokenInteractive), or let the administrator set allowPasswordGrant")
}
