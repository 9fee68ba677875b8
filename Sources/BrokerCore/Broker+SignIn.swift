/// The sign-in flows: the password, the email one-time code (native authentication) and
/// interactive sign-in in the browser. Each ends in ``Broker/adoptSignIn``, the one path that
/// makes a sign-in the device's (or the app's, in default mode).
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

    /// Stores what a successful sign-in returned, makes its account current, and announces it.
    /// A device secret the sign-in replaced (the same user signed in again) is revoked after.
    func adoptSignIn(
        _ tokens: ProviderTokens, clientId: String, scopes: Scopes, correlationId: String,
        startGeneration: UInt64
    ) async throws(BrokerFailure) -> AppTokens {
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
        if signedIn { generation &+= 1 }
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

    /// What the sign-in screen of an app can offer (`GetSignInOptions`); apps read the client
    /// library's `SignInOptions`, decoded from the same dictionary.
    public struct SignInOptions: Sendable, Equatable {
        /// The flows the provider offers, in ``SignInFlow``'s order.
        public var flows: [SignInFlow]
        /// How other apps then get tokens of their own, as far as known.
        public var singleSignOn: [SingleSignOnMechanism]
    }

    /// What the app shows while the user fetches the code.
    public struct SignInChallenge: Sendable, Equatable {
        public var channel: String
        public var sentTo: String
        public var codeLength: UInt32
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

    /// Asks the provider to send a one-time code; returns the flow's id and where the code went.
    public func startSignIn(
        clientId: String, username: String, scopes requested: [String],
        owner: String
    ) async throws(BrokerFailure) -> (flowId: String, challenge: SignInChallenge) {
        try checkClient(clientId)
        try InputRules.username(username)
        try InputRules.scopes(requested)
        try checkTokenStorage()
        if let holder = account(for: clientId), !holder.hasUsername(username) { throw alreadySignedIn(holder) }
        try admitFlow(owner: owner)
        let correlationId = Self.newCorrelationId()
        let challenge = try await callProvider(correlationId) {
            try await self.provider.startCodeSignIn(clientId: clientId, username: username)
        }
        // The limits again: other flows may have started while the provider answered.
        try admitFlow(owner: owner)
        let flowId = Self.newCorrelationId()
        try flows.add(
            .code(
                .init(
                    clientId: clientId, username: username, scopes: signInScopes(requested, clientId: clientId),
                    continuationToken: challenge.continuationToken, startedAt: clock.now())), id: flowId, owner: owner)
        try await endIfCallerLeft(owner)
        logger.info(
            "code sign-in started",
            metadata: [
                "clientId": "\(clientId)", "flowId": "\(flowId)",
                "correlationId": "\(correlationId)",
            ])
        return (
            flowId,
            SignInChallenge(channel: challenge.channel, sentTo: challenge.sentTo, codeLength: challenge.codeLength)
        )
    }

    /// What a device-code sign-in shows the person: where to go and which code to enter.
    public struct DeviceSignInChallenge: Sendable, Equatable {
        public var verificationUri: String
        public var verificationUriComplete: String?
        public var userCode: String
        /// Seconds until the code expires.
        public var expiresIn: Int64
        /// Seconds between the broker's polls, as the provider asked.
        public var interval: Int64
    }

    /// Starts a device-code sign-in (RFC 8628): returns what the person is shown; the broker then
    /// polls the provider at the interval it asks (slower after `slow_down`) until the person has
    /// signed in elsewhere, and the sign-in ends like the others (`AccountChanged`, the tokens,
    /// which ``finishSignIn(flowId:owner:)`` hands to the app).
    public func startDeviceSignIn(clientId: String, scopes requested: [String], owner: String)
        async throws(BrokerFailure) -> (flowId: String, challenge: DeviceSignInChallenge)
    {
        try checkClient(clientId)
        try InputRules.scopes(requested)
        try checkTokenStorage()
        try admitFlow(owner: owner)
        let scopes = signInScopes(requested, clientId: clientId)
        let correlationId = Self.newCorrelationId()
        let provider = self.provider
        let grant = try await callProvider(correlationId) {
            try await provider.startDeviceSignIn(clientId: clientId, scopes: scopes)
        }
        try admitFlow(owner: owner)
        let flowId = Self.newCorrelationId()
        let startGeneration = generation
        let deadline = clock.now() + max(1, grant.expiresIn)
        let task = Task { () async throws -> AppTokens in
            try await self.pollDeviceSignIn(
                grant, clientId: clientId, scopes: scopes, correlationId: correlationId, deadline: deadline,
                startGeneration: startGeneration)
        }
        do { try flows.add(.device(.init(task: task)), id: flowId, owner: owner) } catch {
            task.cancel()
            throw error
        }
        try await endIfCallerLeft(owner)
        logger.info(
            "device sign-in started",
            metadata: ["clientId": "\(clientId)", "flowId": "\(flowId)", "correlationId": "\(correlationId)"])
        return (
            flowId,
            DeviceSignInChallenge(
                verificationUri: grant.verificationUri, verificationUriComplete: grant.verificationUriComplete,
                userCode: grant.userCode, expiresIn: grant.expiresIn, interval: max(1, grant.interval))
        )
    }

    private func pollDeviceSignIn(
        _ grant: DeviceAuthorizationGrant, clientId: String, scopes: Scopes, correlationId: String, deadline: Int64,
        startGeneration: UInt64
    ) async throws(BrokerFailure) -> AppTokens {
        var interval = max(1, grant.interval)
        // After a provider outage the polls slow down, up to this, until the provider answers again.
        var wait = interval
        let provider = self.provider
        while true {
            do {
                try await Task.sleep(for: .seconds(wait))
            } catch {
                throw BrokerFailure(.cancelled, "the device sign-in was cancelled")
            }
            guard clock.now() < deadline else {
                throw BrokerFailure(
                    .codeExpired, "nobody signed in with the code \(grant.userCode) in time; start the sign-in again")
            }
            let poll: DeviceCodePoll
            do throws(BrokerFailure) {
                poll = try await callProvider(correlationId) {
                    try await provider.pollDeviceSignIn(
                        clientId: clientId, deviceCode: grant.deviceCode, scopes: scopes)
                }
            } catch  where error.code == .serverUnavailable {
                // The person may be signing in on their phone right now: an outage of the provider
                // is waited out for the code's lifetime, not turned into a failed sign-in.
                wait = min(max(wait * 2, interval), Self.longestDevicePollWait)
                logger.notice(
                    "the provider is unavailable; the device sign-in polls again later",
                    metadata: ["correlationId": "\(correlationId)", "seconds": "\(wait)"])
                continue
            }
            wait = interval
            switch poll {
            case .pending:
                continue
            case .slowDown:
                interval += 5
                wait = interval
            case .tokens(let tokens):
                return try await adoptSignIn(
                    tokens, clientId: clientId, scopes: scopes, correlationId: correlationId,
                    startGeneration: startGeneration)
            }
        }
    }

    /// The longest pause between device-code polls while the provider is unavailable.
    static let longestDevicePollWait: Int64 = 60

    /// Waits for the device-code sign-in `flowId` of `owner` to end, and returns its tokens.
    public func finishSignIn(flowId: String, owner: String) async throws(BrokerFailure) -> AppTokens {
        try InputRules.flowId(flowId)
        let flow = try flows.deviceFlow(flowId, owner: owner)
        let outcome = await flow.task.result
        flows.remove(flowId, owner: owner)
        switch outcome {
        case .success(let tokens):
            return tokens
        case .failure(let failure as BrokerFailure):
            throw failure
        case .failure:
            throw BrokerFailure(.cancelled, "the device sign-in was cancelled")
        }
    }

    /// Redeems the code. A wrong code leaves the flow usable (`.invalidCode`); an expired one
    /// asks for ``resendCode(flowId:owner:)`` (`.codeExpired`); other failures end the flow.
    public func submitCode(flowId: String, code: String, owner: String) async throws(BrokerFailure) -> AppTokens {
        try InputRules.flowId(flowId)
        try InputRules.code(code)
        let flow = try flows.codeFlow(flowId, owner: owner)
        try checkTokenStorage()
        let startGeneration = generation
        let correlationId = Self.newCorrelationId()
        do {
            let tokens = try await callProvider(correlationId) {
                try await self.provider.submitCode(
                    clientId: flow.clientId, continuationToken: flow.continuationToken,
                    code: code, scopes: flow.scopes)
            }
            flows.remove(flowId, owner: owner)
            return try await adoptSignIn(
                tokens, clientId: flow.clientId, scopes: flow.scopes, correlationId: correlationId,
                startGeneration: startGeneration)
        } catch  where [.invalidCode, .codeExpired, .serverUnavailable].contains(error.code) {
            // The person can type the code again, ask for a new one, or try again once the
            // provider is back: the flow lives on until its lifetime ends.
            throw error
        } catch {
            flows.remove(flowId, owner: owner)
            throw error
        }
    }

    /// Sends a new code for the flow.
    public func resendCode(flowId: String, owner: String) async throws(BrokerFailure) -> SignInChallenge {
        try InputRules.flowId(flowId)
        let flow = try flows.codeFlow(flowId, owner: owner)
        let challenge = try await callProvider(Self.newCorrelationId()) {
            try await self.provider.resendCode(clientId: flow.clientId, continuationToken: flow.continuationToken)
        }
        flows.updateContinuation(flowId, owner: owner, challenge.continuationToken)
        return SignInChallenge(channel: challenge.channel, sentTo: challenge.sentTo, codeLength: challenge.codeLength)
    }

    /// Ends a code flow, or an interactive flow started with that flowId (which then fails with `.cancelled`).
    public func cancelSignIn(flowId: String, owner: String) throws(BrokerFailure) {
        try InputRules.flowId(flowId)
        try flows.cancel(flowId, owner: owner)
        logger.info("sign-in cancelled", metadata: ["flowId": "\(flowId)"])
    }

    /// Admits a new flow of `owner` within the limits (per caller, per process, in all).
    private func admitFlow(owner: String) throws(BrokerFailure) {
        try flows.admit(owner: owner, process: callers.process(of: owner), now: clock.now())
    }

    /// Called once a flow of `owner` is registered: a caller whose departure was handled while
    /// its call was on its way (a provider round trip, the hop to this actor) takes the flow with
    /// it now, so that no flow outlives its caller.
    private func endIfCallerLeft(_ owner: String) async throws(BrokerFailure) {
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

    /// Interactive sign-in in the system browser. `flowId` (chosen by the caller, may be
    /// empty) lets ``cancelSignIn(flowId:owner:)`` end it.
    public func acquireTokenInteractive(
        clientId: String, scopes requested: [String], prompt: Prompt?, loginHint: String?,
        flowId: String, owner: String, claims: String? = nil
    ) async throws(BrokerFailure) -> AppTokens {
        try checkClient(clientId)
        try InputRules.scopes(requested)
        if !flowId.isEmpty { try InputRules.flowId(flowId) }
        if let loginHint, !loginHint.isEmpty { try InputRules.username(loginHint) }
        try checkTokenStorage()
        try admitFlow(owner: owner)
        let scopes = signInScopes(requested, clientId: clientId)
        let startGeneration = generation
        let correlationId = Self.newCorrelationId()
        let id = flowId.isEmpty ? correlationId : flowId
        // Someone is signed in for this app (the device's account in shared mode): that is the
        // account to sign in, so the provider is given it and shows no account picker.
        let holder = account(for: clientId)
        let hint = loginHint.flatMap { $0.isEmpty ? nil : $0 } ?? holder?.username
        let report = onSignInProgress
        // Shared mode: the person at the device must prove who they are now. The browser may still
        // hold the provider's session of the last person (a sign-out need not have ended it), and
        // a provider that is only asked to sign someone in would sign that person in again.
        let shared = configuration.deviceMode == .shared
        let request = InteractiveRequest(
            prompt: shared ? .login : (holder != nil && prompt == .selectAccount ? nil : prompt), loginHint: hint,
            maxAge: shared ? 0 : nil, claims: claims, timeout: configuration.interactiveTimeout,
            progress: { stage, details in
                report(SignInProgressReport(owner: owner, flowId: id, stage: stage, details: details))
            })
        try flows.checkFree(id, owner: owner)
        let task = Task {
            try await self.provider.signInInteractively(clientId: clientId, scopes: scopes, request: request)
        }
        // Free a moment ago, on this actor, with no await since: the add cannot be refused.
        try? flows.add(.interactive(.init(cancel: { task.cancel() })), id: id, owner: owner)
        logger.info(
            "interactive sign-in started",
            metadata: [
                "clientId": "\(clientId)", "flowId": "\(id)",
                "correlationId": "\(correlationId)",
            ])
        defer { flows.remove(id, owner: owner) }
        try await endIfCallerLeft(owner)
        // The flow runs in a task of its own (CancelSignIn and the caller leaving cancel it);
        // cancelling this call, as brokerd does when it stops, cancels it too.
        let tokens = try await callProvider(correlationId) {
            try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        }
        return try await adoptSignIn(
            tokens, clientId: clientId, scopes: scopes, correlationId: correlationId,
            startGeneration: startGeneration)
    }
}
