import Locking
import Logging
import Synchronization

/// The broker: the device's one signed-in account, each app's previous account, the token
/// cache and the sign-out rules. It knows no D-Bus, HTTP or files; those come in through
/// ``IdentityProvider``, ``StateStore`` and ``WallClock``.
///
/// Every change follows one order: check the arguments, return early if nothing changes,
/// validate, change a copy, write it atomically, adopt it, announce it, reply. A failed write
/// leaves the broker as it was. Provider calls are awaited outside that order: the actor stays
/// free for other callers meanwhile, and a change that raced with them is detected with
/// ``generation`` and refused.
///
/// Changes go through the actor, one at a time. Reads do not need it: the state is kept behind a
/// lock, replaced whole by each change, so the `nonisolated` queries (device information, the
/// current account when the app has seen it, a cached token) answer from any thread at once,
/// which lets brokerd answer them on its bus thread without a task or a thread switch.
public actor Broker {
    public let configuration: BrokerConfiguration
    let provider: any IdentityProvider
    private let store: any StateStore
    let clock: any WallClock
    let logger: Logger
    /// Who is still connected, and which process each caller is.
    let callers: any CallerDirectory
    /// What is cleared after every sign-out of the device.
    let cleaner: any DeviceCleaner
    private let onAccountChange: @Sendable (DeviceAccountChange) -> Void
    /// Told each stage an interactive sign-in reaches, for its caller.
    let onSignInProgress: @Sendable (SignInProgress) -> Void
    /// Told when a warning of a sign-out after inactivity starts, is cancelled or ends.
    let onShiftWarning: @Sendable (ShiftWarning) -> Void

    /// The state as of the last change; written only by ``commit(_:announcing:)``.
    private let published: Locked<BrokerState>
    /// Facts learnt while running (what brokerd serves besides its interface), added to the configured ones.
    private let runtimeFacts = Locked<[String: String]>([:])
    nonisolated var state: BrokerState { published.withLock { $0 } }
    /// Bumped whenever the signed-in account changes, so a provider call that straddled a
    /// sign-out or sign-in knows its answer is stale.
    private(set) var generation: UInt64 = 0
    /// At most one refresh per clientId at a time: refresh tokens rotate, so two refreshes with
    /// one token would race (and a provider that detects reuse would revoke them all).
    private var refreshes: [String: (scopes: Scopes, task: Task<AppTokens, any Error>)] = [:]
    /// Sign-ins waiting for a code, the browser or a person elsewhere, by caller and flowId.
    var flows = SignInFlows()
    /// The armed retry of owed revocations, and the delay it waited (doubled at each failure).
    var revocationRetry: Task<Void, Never>?
    var revocationRetryDelay: Duration?
    /// When each clientId's record last changed, on a counter of changes: who is forgotten first
    /// when there are too many. Records from before a start count as the least recent.
    var clientActivity: [String: UInt64] = [:]
    var activityCounter: UInt64 = 0
    /// The clients whose records hold nothing but what they saw (`maxClients` bounds them), kept
    /// as changes come so that a change need not look at every client; nil until first needed.
    var bystanders: Set<String>?
    /// The armed sign-out at the end of an inactivity warning.
    var idleDeadlineTimer: Task<Void, Never>?
    /// A token response showed a family (`foci`): the provider offers family refresh tokens.
    let singleSignOnFamilySeen = Locked(false)
    /// Why token calls are refused now (the keyring that holds the tokens is locked), or nil.
    let tokenStorageLock = Locked<String?>(nil)

    /// - Parameters:
    ///   - initialState: what the store held at start, or nil for a new device.
    ///   - onAccountChange: called once per change of the device's account, after the change
    ///     is written and before the call that made it returns.
    public init(
        configuration: BrokerConfiguration, provider: any IdentityProvider, store: any StateStore,
        clock: any WallClock, initialState: BrokerState, logger: Logger,
        callers: any CallerDirectory = EveryCallerConnected(), cleaner: any DeviceCleaner = NothingToClean(),
        onAccountChange: @escaping @Sendable (DeviceAccountChange) -> Void,
        onSignInProgress: @escaping @Sendable (SignInProgress) -> Void = { _ in },
        onShiftWarning: @escaping @Sendable (ShiftWarning) -> Void = { _ in }
    ) {
        self.onShiftWarning = onShiftWarning
        self.callers = callers
        self.cleaner = cleaner
        self.onSignInProgress = onSignInProgress
        self.configuration = configuration
        self.provider = provider
        self.store = store
        self.clock = clock
        self.logger = logger
        self.onAccountChange = onAccountChange
        self.published = Locked(initialState)
    }

    // MARK: Queries

    /// The device's account (shared mode); nil in default mode, where accounts belong to apps.
    public nonisolated var deviceAccount: Account? { configuration.deviceMode == .shared ? state.current : nil }

    /// A copy of the whole state, for tests and diagnostics.
    public nonisolated var snapshot: BrokerState { state }

    public nonisolated func deviceInformation() -> DeviceInformation {
        DeviceInformation(
            deviceMode: configuration.deviceMode, brokerVersion: configuration.brokerVersion,
            deviceId: state.deviceId, tenantId: configuration.tenantId,
            authority: provider.authority,
            extraDeviceInformation: configuration.extraDeviceInformation.merging(runtimeFacts.withLock { $0 }) { $1 },
            singleSignOn: knownSingleSignOn())
    }

    /// Sets (or, with nil, removes) a fact `deviceInformation()` reports in `extraDeviceInformation`.
    public nonisolated func setDeviceFact(_ key: String, to value: String?) {
        runtimeFacts.withLock { $0[key] = value }
    }

    /// The app's current account and what it saw as current on its previous call.
    ///
    /// After a sign-out elsewhere an app gets (nil, alice) once, then (nil, nil).
    public func currentAccount(clientId: String) throws(BrokerFailure) -> (current: Account?, previous: Account?) {
        if let unchanged = try currentAccountIfSeen(clientId: clientId) { return unchanged }
        let state = self.state
        let current = account(for: clientId, in: state)
        let previous = state.clients[clientId]?.lastSeen
        var next = state
        next.clients[clientId, default: ClientRecord()].lastSeen = current
        next.clients[clientId]?.dropIfEmpty(in: &next, clientId: clientId)
        try commit(next)
        return (current, previous)
    }

    /// ``currentAccount(clientId:)`` when the app already saw the current account (its usual
    /// case), which changes nothing; nil when the answer has to be recorded.
    public nonisolated func currentAccountIfSeen(clientId: String) throws(BrokerFailure) -> (
        current: Account?, previous: Account?
    )? {
        try checkClient(clientId)
        let state = self.state
        let current = account(for: clientId, in: state)
        let previous = state.clients[clientId]?.lastSeen
        return previous == current ? (current, previous) : nil
    }

    /// The accounts the app can use: the device's (shared mode); in default mode its own, then
    /// those other apps signed in with that single sign-on can give it tokens for.
    public nonisolated func accounts(clientId: String) throws(BrokerFailure) -> [Account] {
        try checkClient(clientId)
        let state = self.state
        let own = account(for: clientId, in: state)
        guard configuration.deviceMode == .default else { return own.map { [$0] } ?? [] }
        let others = state.singleSignOn.keys.sorted().compactMap { singleSignOnAccount($0, in: state) }
            .filter { $0.identifier != own?.identifier }
        return (own.map { [$0] } ?? []) + others
    }

    // MARK: Sign-in

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

    // MARK: Tokens

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

    // MARK: Sign-out

    /// Shared mode: signs the whole device out (every app's tokens go, refresh tokens are
    /// revoked where the provider offers it, `AccountChanged` goes out). Default mode: removes
    /// the account for this clientId only. The provider's browser session is ended as the
    /// configuration's ``BrowserSignOutPolicy`` says, given `fromBrowser` (what the app asked).
    /// The account is signed out once the state is written; what the provider could not do
    /// afterwards (revocation, ending the browser session) is reported in the outcome, not thrown.
    @discardableResult
    public func signOut(clientId: String, accountId: String, fromBrowser: Bool = false) async throws(BrokerFailure)
        -> SignOutOutcome
    {
        try checkClient(clientId)
        try InputRules.accountId(accountId)
        let account = try signedInAccount(clientId: clientId, accountId: accountId)
        return try await end(account, for: clientId, fromBrowser: fromBrowser, cause: .app)
    }

    /// Ends the shift (shared mode) without an app asking: inactivity, the screen lock, a
    /// reboot, the provider. The same sign-out as ``signOut(clientId:accountId:fromBrowser:)``,
    /// with its cause. Nil when nobody is signed in (or in default mode, where there is no shift).
    @discardableResult
    public func endShift(cause: SignOutCause) async throws(BrokerFailure) -> SignOutOutcome? {
        guard configuration.deviceMode == .shared, let account = state.current else { return nil }
        return try await end(account, for: shiftClientId(for: account), fromBrowser: false, cause: cause)
    }

    /// At start, before anyone is served: with `signOutAfterReboot`, a sign-in made in another
    /// boot ends (cause `reboot`), written at once; what is left to do at the provider and on the
    /// device runs in the returned task. A sign-in whose boot is unknown (made by a broker that
    /// did not record it) counts as another boot's. A restart of brokerd alone keeps the sign-in.
    public func endShiftIfRebooted() throws(BrokerFailure) -> Task<SignOutOutcome, Never>? {
        guard configuration.signOutAfterReboot, configuration.deviceMode == .shared, let account = state.current,
            let boot = configuration.bootId, state.signedInBoot != boot
        else { return nil }
        let clientId = shiftClientId(for: account)
        let ended = try write(end: account, for: clientId, cause: .reboot)
        return Task { await self.followUp(ended, fromBrowser: false) }
    }

    /// The app whose sign-in the device's is (its ID token is the end-session page's hint).
    func shiftClientId(for account: Account) -> String {
        state.singleSignOn[account.identifier]?.anchorClientId
            ?? state.clients.keys.sorted().first { state.clients[$0]?.refreshToken != nil } ?? ""
    }

    /// Every way the device's sign-in ends comes here: the state written (the revocations owed
    /// with it) before `AccountChanged`, then the revocations, the browser policy and the
    /// clean-up list, each reported in the outcome, none undoing the sign-out.
    func end(_ account: Account, for clientId: String, fromBrowser: Bool, cause: SignOutCause)
        async throws(BrokerFailure) -> SignOutOutcome
    {
        await followUp(try write(end: account, for: clientId, cause: cause), fromBrowser: fromBrowser)
    }

    /// A sign-in ended and written, with what is left to do at the provider and on the device.
    struct EndedSignIn: Sendable {
        var account: Account
        var clientId: String
        var cause: SignOutCause
        var revoke: [PendingRevocation]
        var idTokenHint: String?
    }

    /// The sign-out's change of state: written and announced before anything else happens.
    private func write(end account: Account, for clientId: String, cause: SignOutCause) throws(BrokerFailure)
        -> EndedSignIn
    {
        var next = state
        var revoke: [PendingRevocation] = []
        let affected = configuration.deviceMode == .shared ? Array(next.clients.keys) : [clientId]
        let idTokenHint =
            (next.clients[clientId].map { [$0] } ?? []).flatMap { $0.accessTokens.values }.compactMap(\.idToken).first
            ?? affected.lazy.compactMap { next.clients[$0] }.flatMap { $0.accessTokens.values }.compactMap(\.idToken)
            .first
        for id in affected {
            if let token = next.clients[id]?.refreshToken {
                revoke.append(.init(clientId: id, token: .refreshToken(token)))
            }
            next.clients[id]?.dropTokens()
            next.clients[id]?.dropIfEmpty(in: &next, clientId: id)
        }
        // Single sign-on ends with the sign-in that made it: the device's (shared mode), or in
        // default mode this app's, so no app gets a token from it afterwards.
        for (identifier, grant) in next.singleSignOn
        where configuration.deviceMode == .shared || grant.anchorClientId == clientId {
            if let deviceSecret = grant.deviceSecret {
                revoke.append(.init(clientId: grant.anchorClientId, token: .deviceSecret(deviceSecret.secret)))
            }
            next.singleSignOn[identifier] = nil
        }
        if configuration.deviceMode == .shared {
            next.current = nil
            next.signedInBoot = nil
            next.signedInAt = nil
            next.signOutDeadline = nil
        }
        // Owed to the provider from the moment the sign-out is written: a crash or an outage
        // before the provider confirms leaves them pending, never forgotten.
        next.owe(revoke)
        // Default mode: the app's own account changed, which no other app sees, so no signal.
        try commit(
            next,
            announcing: configuration.deviceMode == .shared
                ? DeviceAccountChange(current: nil, previous: account, reason: .signedOut, cause: cause) : nil,
            endingWarning: state.signOutDeadline != nil)
        generation &+= 1
        if state.signOutDeadline == nil, let timer = idleDeadlineTimer {
            // A warning was on: it ends with this sign-out, whatever its cause.
            timer.cancel()
            idleDeadlineTimer = nil
        }
        logger.info(
            "signed out",
            metadata: [
                "clientId": "\(clientId)", "account": "\(account.identifier)",
                "mode": "\(configuration.deviceMode.rawValue)", "cause": "\(cause.rawValue)",
            ])
        return EndedSignIn(account: account, clientId: clientId, cause: cause, revoke: revoke, idTokenHint: idTokenHint)
    }

    /// What a written sign-out still does: revocations, the browser session, the clean-up list.
    private func followUp(_ ended: EndedSignIn, fromBrowser: Bool) async -> SignOutOutcome {
        let (clientId, revoke, idTokenHint) = (ended.clientId, ended.revoke, ended.idTokenHint)
        var outcome = SignOutOutcome()
        outcome.cause = ended.cause
        for problem in await revokeOwed(revoke) {
            outcome.tokensRevoked = false
            outcome.note(problem)
        }
        if tokenStorageIsLocked {
            outcome.tokensRevoked = false
            outcome.note("the keyring is locked: the tokens it keeps are revoked once it is unlocked")
        }
        if configuration.browserSignOut.endsBrowserSession(appAsked: fromBrowser) {
            do {
                if try await provider.endBrowserSession(clientId: clientId, idTokenHint: idTokenHint) == .done {
                    outcome.browserSessionEnded = true
                } else {
                    outcome.note("the provider offers no end_session_endpoint; its browser session stays")
                }
            } catch {
                outcome.note(
                    "the provider's browser session may still be open: its end-session page could not be opened "
                        + "(\(Self.describe(error)))")
            }
        } else if fromBrowser {
            outcome.note("the administrator's browserSignOut is never: the provider's browser session stays")
        }
        if configuration.deviceMode == .shared {
            (outcome.cleanedUp, outcome.notCleanedUp) = await cleaner.clean()
            if !outcome.notCleanedUp.isEmpty {
                outcome.note("some of what the device clears after a sign-out could not be removed")
            }
        }
        for note in outcome.notes { logger.notice("sign-out: \(note)", metadata: ["clientId": "\(clientId)"]) }
        return outcome
    }

    // MARK: Helpers

    /// A provider error in words, without the type's decoration.
    static func describe(_ error: any Error) -> String {
        (error as? BrokerFailure)?.message ?? "\(error)"
    }

    /// The account this clientId sees as current: the device's in shared mode, its own otherwise.
    nonisolated func account(for clientId: String, in state: BrokerState) -> Account? {
        configuration.deviceMode == .shared ? state.current : state.clients[clientId]?.account
    }

    nonisolated func account(for clientId: String) -> Account? { account(for: clientId, in: state) }

    nonisolated func signedInAccount(clientId: String, accountId: String) throws(BrokerFailure) -> Account {
        try signedInAccount(clientId: clientId, accountId: accountId, in: state)
    }

    nonisolated func signedInAccount(clientId: String, accountId: String, in state: BrokerState) throws(BrokerFailure)
        -> Account
    {
        guard let account = account(for: clientId, in: state) else {
            throw BrokerFailure(.noAccount, "nobody is signed in; sign in first")
        }
        if !accountId.isEmpty && accountId != account.identifier {
            // An app that passes a username (an identifier has no "@") would otherwise read that its
            // user is not signed in, when it only named the account the wrong way.
            if account.hasUsername(accountId) || accountId.contains("@") {
                throw BrokerFailure(
                    .noAccount,
                    "accountId must be the account's identifier, not a username: the signed-in account "
                        + "\(account.username) has the identifier \(account.identifier) (GetCurrentAccount and "
                        + "GetAccounts give it); or pass an empty accountId for the signed-in account")
            }
            throw BrokerFailure(
                .noAccount,
                "no signed-in account has the identifier \(accountId); the signed-in account's is "
                    + "\(account.identifier) (accountId is an account's identifier, or empty for the signed-in account)"
            )
        }
        return account
    }

    nonisolated func checkClient(_ clientId: String) throws(BrokerFailure) {
        try InputRules.clientId(clientId)
        if let known = configuration.knownClientIds, !known.contains(clientId) {
            // Logged as an AccessDenied is: an administrator looks for a misconfigured app here.
            logger.warning("refused a clientId the configuration does not list", metadata: ["clientId": "\(clientId)"])
            throw BrokerFailure(
                .unknownClient,
                "clientId \(clientId) is not registered with this broker; add it to the configuration's clients")
        }
    }

    nonisolated func alreadySignedIn(_ holder: Account) -> BrokerFailure {
        BrokerFailure(
            .accountAlreadySignedIn,
            "\(holder.username) is signed in on this device; sign out first to sign in as someone else")
    }

    /// Writes `proposed` and adopts it; announces the end of a sign-out warning (`endingWarning`)
    /// and then `change` (the device's account changed), in that order, so that an app that hears
    /// the account change reads no deadline any more; then makes the write durable. The caller
    /// replies after that. On a failed write nothing changes and nothing is announced.
    ///
    /// The announcement goes out before the sync because apps act on it at once (the next
    /// person must not see the last one's data) and a sync costs a disk flush, about 0.5 ms here.
    /// It is safe: once `save` returned, a restarted brokerd reads the new state; only a power
    /// loss in the next instant could bring back the old one, which the store keeps whole.
    func commit(_ proposed: BrokerState, announcing change: DeviceAccountChange? = nil, endingWarning: Bool = false)
        throws(BrokerFailure)
    {
        var next = proposed
        let nextBystanders = noteActiveClients(from: state, to: &next)
        do {
            try store.save(next)
        } catch {
            logger.error("could not save the broker state; the change was not made", metadata: ["error": "\(error)"])
            throw BrokerFailure(.storageFailed, "the broker could not save its state (\(error)); nothing was changed")
        }
        published.withLock { $0 = next }
        bystanders = nextBystanders
        if endingWarning { onShiftWarning(.over) }
        if let change { onAccountChange(change) }
        do {
            try store.sync()
        } catch {
            // The state is in place for this and any restarted brokerd; only its survival of a
            // power loss is in doubt, and the change cannot be taken back once announced.
            logger.error(
                "could not flush the broker state to disk; it may not survive a power loss",
                metadata: ["error": "\(error)"])
        }
    }

    func callProvider<T: Sendable>(
        _ correlationId: String,
        _ body: @Sendable () async throws -> T
    ) async throws(BrokerFailure) -> T {
        do {
            return try await body()
        } catch let failure as BrokerFailure {
            logger.info(
                "provider refused",
                metadata: ["correlationId": "\(correlationId)", "error": "\(failure.code.rawValue)"])
            throw failure
        } catch is CancellationError {
            throw BrokerFailure(.cancelled, "the request was cancelled")
        } catch {
            logger.warning(
                "provider call failed", metadata: ["correlationId": "\(correlationId)", "error": "\(error)"])
            throw BrokerFailure(.serverError, "the identity provider call failed: \(error)")
        }
    }

    private static func unwrap(_ result: Result<AppTokens, any Error>) throws(BrokerFailure) -> AppTokens {
        switch result {
        case .success(let value): return value
        case .failure(let failure as BrokerFailure): throw failure
        case .failure(let error): throw BrokerFailure(.serverError, "\(error)")
        }
    }

    /// A correlation id for a request: an RFC 4122 version 4 UUID string, unique in this
    /// process (a counter) and across processes (a random seed). Made on every silent call, so
    /// without a system call: they only need to tell requests apart in logs, not be secret.
    static func newCorrelationId() -> String {
        let n = correlationCounter.wrappingAdd(1, ordering: .relaxed).oldValue
        return uuidString(splitMix(correlationSeed &+ 2 &* n), splitMix(correlationSeed &+ 2 &* n &+ 1))
    }

    private static let correlationSeed: UInt64 = {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }()
    private static let correlationCounter = Atomic<UInt64>(0)

    /// SplitMix64's output function: distinct inputs give distinct, well-mixed outputs.
    private static func splitMix(_ input: UInt64) -> UInt64 {
        var z = input &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Sixteen bytes as a version 4 UUID string (the version and variant bits set).
    private static func uuidString(_ high: UInt64, _ low: UInt64) -> String {
        var bytes = (high, low)
        return withUnsafeMutableBytes(of: &bytes) { b in
            b[6] = (b[6] & 0x0F) | 0x40
            b[8] = (b[8] & 0x3F) | 0x80
            return String(unsafeUninitializedCapacity: 36) { out in
                func hex(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : 0x57 + nibble }
                var at = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    out[at] = hex(b[i] >> 4)
                    out[at + 1] = hex(b[i] & 0x0F)
                    at += 2
                }
                return at
            }
        }
    }

    /// A new device id: a random UUID, for a device without state.
    public static func newDeviceId() -> String {
        var generator = SystemRandomNumberGenerator()
        return uuidString(generator.next(), generator.next())
    }
}

extension ClientRecord {
    /// Removes the record from `state` when nothing worth keeping is left in it.
    fileprivate func dropIfEmpty(in state: inout BrokerState, clientId: String) {
        if isEmpty { state.clients[clientId] = nil }
    }
}
