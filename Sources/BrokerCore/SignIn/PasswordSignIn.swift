/// The password sign-in (`SignInWithPassword`): native authentication's password path, or the
/// resource-owner password grant where the administrator allows it. One call, nothing pending.

/// What the provider does for it.
public protocol PasswordSignInProvider: Sendable {
    func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws
        -> ProviderTokens
}

extension PasswordSignInProvider where Self: SignInRefusingProvider {
    public func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws
        -> ProviderTokens
    { throw signInRefusal }
}

extension Broker {
    public func signInWithPassword(
        clientId: String, username: String, password: String,
        scopes requested: [String]
    ) async throws(BrokerFailure) -> AppTokens {
        try checkClient(clientId)
        try InputRules.username(username)
        try InputRules.password(password)
        try InputRules.scopes(requested)
        try checkTokenStorage()
        if let holder = account(for: clientId), !holder.hasUsername(username) {
            throw alreadySignedIn(holder)
        }
        let scopes = signInScopes(requested, clientId: clientId)
        let startGeneration = generation
        let correlationId = Self.newCorrelationId()
        logger.info(
            "sign-in with password started", metadata: ["clientId": "\(clientId)", "correlationId": "\(correlationId)"])
        let tokens = try await callProvider(correlationId) {
            try await self.provider.signInWithPassword(
                clientId: clientId, username: username, password: password, scopes: scopes)
        }
        return try await adoptSignIn(
            tokens, clientId: clientId, scopes: scopes, correlationId: correlationId,
            startGeneration: startGeneration)
    }
}
