/// What every sign-in flow shares (one file per flow beside this one, each with its provider
/// port): its scopes, the limits and ownership of flows in progress, cancelling, and
/// ``Broker/adoptSignIn``, the one path that makes a sign-in the device's (or the app's, in
/// default mode).
extension Broker {
    /// Starts a sign-in of the flows `StartSignIn` starts (``SignInFlow/startedBySignInMethod``)
    /// and returns what the person is asked for: the one entry the adapters call, so that a flow
    /// added to ``SignInFlow`` is named here by the compiler.
    public func startSignIn(
        _ flow: SignInFlow, clientId: String, username: String, scopes: [String], owner: String
    ) async throws(BrokerFailure) -> (flowId: String, challenge: SignInChallenge) {
        switch flow {
        case .emailCode:
            let started = try await startEmailCodeSignIn(
                clientId: clientId, username: username, scopes: scopes, owner: owner)
            return (started.flowId, .codeChallenge(started.challenge))
        case .deviceCode:
            let started = try await startDeviceCodeSignIn(clientId: clientId, scopes: scopes, owner: owner)
            return (started.flowId, .deviceCodeChallenge(started.challenge))
        case .ciba:
            let started = try await startPhoneApprovalSignIn(
                clientId: clientId, username: username, scopes: scopes, owner: owner)
            return (started.flowId, .phoneApprovalChallenge(started.challenge))
        case .password, .browser:
            throw BrokerFailure(.invalidArgument, "\(flow.rawValue) is started by \(flow.startedBy.rawValue)")
        }
    }

    /// Stores what a successful sign-in returned, makes its account current, and announces it.
    /// A device secret the sign-in replaced (the same user signed in again) is revoked after.
    func adoptSignIn(
        _ tokens: ProviderTokens, clientId: String, scopes: Scopes, correlationId: String,
        startGeneration: UInt64
    ) async throws(BrokerFailure) -> AppTokens {
        // The last sign-out's clean-up is finished before anyone's sign-in is: it must never
        // meet the next person's files.
        await cleanUpOwed()
        // The keyring may have locked while the person signed in: the tokens have nowhere to go.
        try checkTokenStorage()
        let holder = account(for: clientId)
        if let holder, holder.identifier != tokens.account.identifier {
            throw alreadySignedIn(holder)
        }
        if holder == nil, generation != startGeneration {
            // Someone else signed in or out while the provider answered; let the caller retry on
            // the new state rather than silently replacing it.
            throw BrokerFailure(.accountAlreadySignedIn, "the device's account changed during the sign-in; try again")
        }
        var next = state
        var record = next.clients[clientId] ?? ClientRecord()
        if record.account?.identifier != tokens.account.identifier { record.dropTokens() }
        record.account = tokens.account
        record.refreshToken = tokens.refreshToken ?? record.refreshToken
        record.accessTokens[scopes.joined] = CachedAccessToken(
            accessToken: tokens.accessToken, expiresOn: tokens.expiresOn, idToken: tokens.idToken, scopes: scopes)
        next.clients[clientId] = record
        let signedIn = configuration.deviceMode == .shared && next.current == nil
        if signedIn {
            next.current = tokens.account
            next.signedInBoot = configuration.bootId
            next.signedInAt = clock.now()
            // The device's sign-in is the only one other apps build on.
            next.singleSignOn = [:]
        }
        let grant = next.singleSignOn[tokens.account.identifier, default: SingleSignOnGrant(anchorClientId: clientId)]
        let replaced = grant.deviceSecret
        next.singleSignOn[tokens.account.identifier, default: grant].update(with: tokens, from: clientId)
        try commit(
            next,
            announcing: signedIn ? DeviceAccountChange(current: tokens.account, previous: nil, reason: .signedIn) : nil)
        if signedIn {
            generation &+= 1
            signedInWhilePersonIdle()
        }
        logger.info(
            "signed in",
            metadata: [
                "clientId": "\(clientId)", "correlationId": "\(correlationId)",
                "account": "\(tokens.account.identifier)",
            ])
        if let replaced, replaced != next.singleSignOn[tokens.account.identifier]?.deviceSecret {
            // The provider's session of the old secret would otherwise outlive every sign-out.
            do {
                _ = try await provider.revoke(clientId: grant.anchorClientId, token: .deviceSecret(replaced.secret))
            } catch {
                logger.notice(
                    "a replaced device secret could not be revoked at the provider",
                    metadata: ["error": "\(Self.describe(error))"])
            }
        }
        return AppTokens(
            accessToken: tokens.accessToken, expiresOn: tokens.expiresOn, idToken: tokens.idToken,
            scopes: scopes, account: tokens.account, authority: provider.authority,
            correlationId: correlationId)
    }

    /// What a sign-in of `clientId` asks the provider for: the call's scopes and the app's default
    /// ones (``BrokerConfiguration/defaultScopes``). The grant a sign-in makes bounds what later
    /// silent calls can refresh, so the app's usual scopes are asked for whatever the call named.
    nonisolated func signInScopes(_ requested: [String], clientId: String) -> Scopes {
        Scopes(requested + (configuration.defaultScopes[clientId] ?? []))
    }

    /// What the configured provider lets `clientId` offer (`GetSignInOptions`): its sign-in
    /// flows, and how other apps then get tokens of their own.
    public func signInOptions(clientId: String) async throws(BrokerFailure) -> SignInOptions {
        try checkClient(clientId)
        let provider = self.provider
        let correlationId = Self.newCorrelationId()
        let flows = try await callProvider(correlationId) { try await provider.signInFlows() }
        // signInFlows read discovery, so the mechanisms it advertises are known now.
        return SignInOptions(flows: flows, singleSignOn: knownSingleSignOn() ?? [])
    }

    /// Ends a code flow, or an interactive flow started with that flowId (which then fails with `.cancelled`).
    public func cancelSignIn(flowId: String, owner: String) throws(BrokerFailure) {
        try InputRules.flowId(flowId)
        try flows.cancel(flowId, owner: owner)
        logger.info("sign-in cancelled", metadata: ["flowId": "\(flowId)"])
    }

    /// Admits a new flow of `owner` within the limits (per caller, per process, per program, in all).
    func admitFlow(owner: String) throws(BrokerFailure) {
        try flows.admit(owner: owner, group: callers.groups(of: owner), now: clock.now())
    }

    /// Called once a flow of `owner` is registered: a caller whose departure was handled while
    /// its call was on its way (a provider round trip, the hop to this actor) takes the flow with
    /// it now, so that no flow outlives its caller.
    func endIfCallerLeft(_ owner: String) async throws(BrokerFailure) {
        guard await callers.isConnected(owner) else {
            callerLeft(owner)
            throw BrokerFailure(.cancelled, "the caller left the bus; its sign-in was ended")
        }
    }

    /// Forgets every flow of a caller that left the bus.
    public func callerLeft(_ owner: String) {
        let dropped = flows.dropAll(owner: owner)
        if dropped > 0 {
            logger.info(
                "caller left; its sign-ins were dropped", metadata: ["caller": "\(owner)", "flows": "\(dropped)"])
        }
    }
}
