import BrokerAPI
import Logging

/// Tokens for apps: from the cache, the refresh token, or single sign-on; one refresh at a time per app.
extension Broker {

    /// A token from the cache while it has more than the margin of life left, otherwise from
    /// the refresh token. `.interactionRequired` when neither works.
    ///
    /// `claims` (a resource's claims challenge, Continuous Access Evaluation's
    /// `insufficient_claims`): the cache is skipped, the refresh carries them, and a refusal is
    /// `.interactionRequired` for an interactive call with the same claims.
    public func acquireTokenSilent(
        clientId: String, scopes requested: [String], accountId: String,
        forceRefresh: Bool, claims: String? = nil
    ) async throws(BrokerFailure) -> AppTokens {
        try checkClient(clientId)
        try InputRules.scopes(requested)
        try InputRules.accountId(accountId)
        try checkTokenStorage()
        let scopes = Scopes(requested)
        var force = forceRefresh || claims != nil
        var account: Account
        while true {
            let state = self.state
            account = try silentAccount(clientId: clientId, accountId: accountId, in: state)
            if !force, let cached = cachedToken(clientId: clientId, scopes: scopes, account: account, in: state) {
                return cached
            }
            guard let running = refreshes[clientId] else { break }
            let result: Result<AppTokens, any Error>
            do { result = .success(try await running.task.value) } catch { result = .failure(error) }
            // A challenge asks for a token issued after it: one already on its way may not be.
            if running.scopes == scopes, claims == nil {
                // The same request was already on its way: share its answer.
                return try Self.unwrap(result)
            }
            // A refresh for other scopes of this app rotated the refresh token; look again (a
            // claims challenge still wants a token of its own).
            force = claims != nil
        }
        do {
            return try await refresh(clientId: clientId, scopes: scopes, account: account, claims: claims)
        } catch let failure where claims != nil && failure.code == .interactionRequired {
            throw BrokerFailure(
                .interactionRequired,
                "\(failure.message); the claims challenge needs the person: call AcquireTokenInteractive with the "
                    + "same claims option")
        }
    }

    /// New tokens for the app: with its refresh token, or without one through single sign-on
    /// from another app's sign-in. One at a time per app (``refreshes``).
    func refresh(clientId: String, scopes: Scopes, account: Account, claims: String? = nil) async throws(BrokerFailure)
        -> AppTokens
    {
        let startGeneration = generation
        let correlationId = Self.newCorrelationId()
        let task: Task<AppTokens, any Error>
        if let refreshToken = state.clients[clientId]?.refreshToken,
            state.clients[clientId]?.account?.identifier == account.identifier
        {
            task = refreshTask(
                clientId: clientId, scopes: scopes, refreshToken: refreshToken, claims: claims,
                correlationId: correlationId, startGeneration: startGeneration)
        } else {
            task = Task {
                try await self.signInThroughSingleSignOn(
                    clientId: clientId, scopes: scopes, account: account,
                    correlationId: correlationId, startGeneration: startGeneration)
            }
        }
        refreshes[clientId] = (scopes, task)
        let result: Result<AppTokens, any Error>
        do { result = .success(try await task.value) } catch { result = .failure(error) }
        refreshes[clientId] = nil
        return try Self.unwrap(result)
    }

    private func refreshTask(
        clientId: String, scopes: Scopes, refreshToken: String, claims: String?, correlationId: String,
        startGeneration: UInt64
    ) -> Task<AppTokens, any Error> {
        Task<AppTokens, any Error> {
            self.logger.debug(
                "refreshing tokens", metadata: ["clientId": "\(clientId)", "correlationId": "\(correlationId)"])
            let outcome: ProviderTokens
            do {
                outcome = try await self.callProvider(correlationId) {
                    try await self.provider.refresh(
                        clientId: clientId, refreshToken: refreshToken, scopes: scopes, claims: claims)
                }
            } catch let error as BrokerFailure
                where claims != nil && error.code == .interactionRequired && !error.grantEnded
            {
                // The provider refused the claims (a step-up the person must make), not the token.
                throw error
            } catch let error as BrokerFailure where error.code == .interactionRequired && !error.refreshTokenStillValid
            {
                try self.forgetRejectedRefreshToken(clientId: clientId, refreshToken: refreshToken)
                throw error
            } catch let error as BrokerFailure where error.code == .interactionRequired {
                // Scopes beyond the refresh token's grant: the token still serves its own, and
                // the device's sign-in may give these without a person, as it does another app.
                guard let account = self.account(for: clientId) else { throw error }
                return try await self.widenThroughSingleSignOn(
                    clientId: clientId, scopes: scopes, account: account, refusal: error, replacing: refreshToken,
                    correlationId: correlationId, startGeneration: startGeneration)
            }
            return try self.adoptRefresh(
                outcome, clientId: clientId, scopes: scopes, usedRefreshToken: refreshToken,
                correlationId: correlationId, startGeneration: startGeneration)
        }
    }

    private func adoptRefresh(
        _ tokens: ProviderTokens, clientId: String, scopes: Scopes, usedRefreshToken: String,
        correlationId: String, startGeneration: UInt64
    ) throws(BrokerFailure) -> AppTokens {
        guard generation == startGeneration, let account = account(for: clientId),
            state.clients[clientId]?.refreshToken == usedRefreshToken
        else {
            throw BrokerFailure(.noAccount, "the account was signed out while its token was being refreshed")
        }
        guard tokens.account.identifier == account.identifier else {
            throw BrokerFailure(
                .serverError,
                "the provider answered the refresh for \(account.username) with another user "
                    + "(\(tokens.account.username))"
            )
        }
        var next = state
        next.clients[clientId]?.refreshToken = tokens.refreshToken ?? usedRefreshToken
        next.clients[clientId]?.accessTokens[scopes.joined] = CachedAccessToken(
            accessToken: tokens.accessToken, expiresOn: tokens.expiresOn, idToken: tokens.idToken, scopes: scopes)
        try commit(next)
        logger.info("tokens refreshed", metadata: ["clientId": "\(clientId)", "correlationId": "\(correlationId)"])
        return AppTokens(
            accessToken: tokens.accessToken, expiresOn: tokens.expiresOn, idToken: tokens.idToken,
            scopes: scopes, account: account, authority: provider.authority, correlationId: correlationId)
    }

    /// The provider refused the refresh token for good: drop it (and the access tokens minted
    /// with it) so the app goes interactive; the account itself stays signed in.
    private func forgetRejectedRefreshToken(clientId: String, refreshToken: String) throws(BrokerFailure) {
        guard state.clients[clientId]?.refreshToken == refreshToken else { return }
        var next = state
        next.clients[clientId]?.refreshToken = nil
        next.clients[clientId]?.accessTokens = [:]
        try commit(next)
        logger.notice(
            "the provider rejected the refresh token; interaction required", metadata: ["clientId": "\(clientId)"])
    }

    /// ``acquireTokenSilent(clientId:scopes:accountId:forceRefresh:)`` when the cache has the
    /// token (its usual case), which changes nothing; nil when it takes a refresh.
    public nonisolated func cachedTokenIfFresh(
        clientId: String, scopes requested: [String],
        accountId: String
    ) throws(BrokerFailure) -> AppTokens? {
        try checkClient(clientId)
        try InputRules.scopes(requested)
        try InputRules.accountId(accountId)
        // Locked: the async path says so.
        guard tokenStorageLock.withLock({ $0 == nil }) else { return nil }
        let state = self.state
        let account = try silentAccount(clientId: clientId, accountId: accountId, in: state)
        return cachedToken(clientId: clientId, scopes: Scopes(requested), account: account, in: state)
    }

    private nonisolated func cachedToken(
        clientId: String, scopes: Scopes, account: Account,
        in state: BrokerState
    ) -> AppTokens? {
        guard let cached = state.clients[clientId]?.accessTokens[scopes.joined] else { return nil }
        // Overflow-safe: a stored expiry may be anything a damaged or hostile state file held.
        let (lifeLeft, overflowed) = cached.expiresOn.subtractingReportingOverflow(clock.now())
        guard !overflowed, lifeLeft > configuration.expiryMarginSeconds else { return nil }
        return AppTokens(
            accessToken: cached.accessToken, expiresOn: cached.expiresOn, idToken: cached.idToken,
            scopes: cached.scopes, account: account, authority: provider.authority,
            correlationId: Self.newCorrelationId())
    }
}
