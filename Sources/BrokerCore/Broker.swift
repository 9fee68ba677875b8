import Locking
import Logging

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
    /// Told of each change's events (``BrokerEvent``), together and in the order apps are to hear
    /// them, so that what one change does to the properties goes out as one change.
    let announcer: @Sendable ([BrokerEvent]) -> Void

    /// The state as of the last change; written only by ``commit(_:announcing:)``.
    private let published: Locked<BrokerState>
    /// Facts learnt while running (what brokerd serves besides its interface), added to the configured ones.
    private let runtimeFacts = Locked<[String: String]>([:])
    nonisolated var state: BrokerState { published.withLock { $0 } }
    /// Bumped whenever the signed-in account changes, so a provider call that straddled a
    /// sign-out or sign-in knows its answer is stale.
    var generation: UInt64 = 0
    /// At most one refresh per clientId at a time: refresh tokens rotate, so two refreshes with
    /// one token would race (and a provider that detects reuse would revoke them all).
    var refreshes: [String: (scopes: Scopes, task: Task<AppTokens, any Error>)] = [:]
    /// Sign-ins waiting for a code, the browser or a person elsewhere, by caller and flowId.
    var flows = SignInFlows()
    /// The armed retry of owed revocations, and the delay it waited (doubled at each failure).
    var revocationRetry: Task<Void, Never>?
    var revocationRetryDelay: Duration?
    /// When each clientId's record last changed, on a counter of changes: who is forgotten first
    /// when there are too many. Records from before a start count as the least recent.
    var clientActivity: [String: UInt64] = [:]
    /// The program (``CallerGroups/program``) whose call made each record that holds nothing but
    /// what its app saw, where known: past the bound, the program with the most such records
    /// loses its own first (``noteActiveClients``). In memory: after a restart, records made
    /// before it count as programs of their own.
    var clientProgram: [String: String] = [:]
    var activityCounter: UInt64 = 0
    /// The clients whose records hold nothing but what they saw (`maxClients` bounds them), kept
    /// as changes come so that a change need not look at every client; nil until first needed.
    var bystanders: Set<String>?
    /// The clean-up after a sign-out, while it runs: a sign-in waits for it.
    var cleaning: Task<CleanUpReport, Never>?
    /// The armed sign-out at the end of an inactivity warning.
    var idleDeadlineTimer: Task<Void, Never>?
    /// The idle source said the person was inactive while nobody was signed in, and has not
    /// heard them since: a sign-in that comes without them (a device code approved on a phone, a
    /// sign-in by a script) starts its own quiet period, armed here.
    var personIdle = false
    var idleQuietTimer: Task<Void, Never>?
    /// A token response showed a family (`foci`): the provider offers family refresh tokens.
    let singleSignOnFamilySeen = Locked(false)
    /// Why token calls are refused now (the keyring that holds the tokens is locked), or nil.
    let tokenStorageLock = Locked<String?>(nil)

    /// - Parameters:
    ///   - initialState: what the store held at start, or nil for a new device.
    ///   - announce: called with the events of each change, in order: for a change of the state,
    ///     after it is written and before the call that made it returns.
    public init(
        configuration: BrokerConfiguration, provider: any IdentityProvider, store: any StateStore,
        clock: any WallClock, initialState: BrokerState, logger: Logger,
        callers: any CallerDirectory = EveryCallerConnected(), cleaner: any DeviceCleaner = NothingToClean(),
        announce: @escaping @Sendable ([BrokerEvent]) -> Void
    ) {
        self.callers = callers
        self.cleaner = cleaner
        self.configuration = configuration
        self.provider = provider
        self.store = store
        self.clock = clock
        self.logger = logger
        self.announcer = announce
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
    /// After a sign-out elsewhere an app gets (nil, alice) once, then (nil, nil). `caller` (the
    /// connection) names the program whose share a new record counts against.
    public func currentAccount(clientId: String, caller: String? = nil) throws(BrokerFailure) -> (
        current: Account?, previous: Account?
    ) {
        if let unchanged = try currentAccountIfSeen(clientId: clientId) { return unchanged }
        let state = self.state
        let current = account(for: clientId, in: state)
        let previous = state.clients[clientId]?.lastSeen
        if state.clients[clientId] == nil, let caller {
            clientProgram[clientId] = callers.groups(of: caller).program
        }
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
    /// and then `change` (the device's account changed), in that order and together, so that an
    /// app that hears the account change reads no deadline any more and hears of both properties
    /// in one `PropertiesChanged`; then makes the write durable. The caller
    /// replies after that. On a failed write nothing changes and nothing is announced.
    ///
    /// The announcement goes out before the sync because apps act on it at once (the next
    /// person must not see the last one's data) and a sync costs a disk flush, about 0.5 ms here.
    /// It is safe: once `save` returned, a restarted brokerd reads the new state; only a power
    /// loss in the next instant could bring back the old one, which the store keeps whole.
    /// `revoked`: refresh tokens the change removes that the provider revoked (``StateStore``).
    func commit(
        _ proposed: BrokerState, announcing change: DeviceAccountChange? = nil, endingWarning: Bool = false,
        revoked: Set<String> = []
    ) throws(BrokerFailure) {
        var next = proposed
        let nextBystanders = noteActiveClients(from: state, to: &next)
        do {
            try store.save(next, revoked: revoked)
        } catch {
            logger.error("could not save the broker state; the change was not made", metadata: ["error": "\(error)"])
            throw BrokerFailure(.storageFailed, "the broker could not save its state (\(error)); nothing was changed")
        }
        published.withLock { $0 = next }
        bystanders = nextBystanders
        var events: [BrokerEvent] = endingWarning ? [.shiftWarning(.over)] : []
        if let change { events.append(.accountChanged(change)) }
        if !events.isEmpty { announcer(events) }
        do {
            try store.sync()
        } catch {
            // The state is in place for this and any restarted brokerd; its survival of a power
            // loss is in doubt, or a secret it no longer holds is still in its files until the next
            // change (the error says which), and the change cannot be taken back once announced.
            logger.error(
                "could not finish writing the broker state (the change stands)", metadata: ["error": "\(error)"])
        }
    }

    /// Announces `event` alone, for what is no change of the state or is announced apart from it.
    func announce(_ event: BrokerEvent) { announcer([event]) }

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

    static func unwrap(_ result: Result<AppTokens, any Error>) throws(BrokerFailure) -> AppTokens {
        switch result {
        case .success(let value): return value
        case .failure(let failure as BrokerFailure): throw failure
        case .failure(let error): throw BrokerFailure(.serverError, "\(error)")
        }
    }
}

extension ClientRecord {
    /// Removes the record from `state` when nothing worth keeping is left in it. The app of a
    /// single sign-on grant keeps its record while the grant lasts (the state file's reader
    /// holds a grant without its app's record for damaged).
    func dropIfEmpty(in state: inout BrokerState, clientId: String) {
        guard isEmpty, !state.singleSignOn.values.contains(where: { $0.anchorClientId == clientId }) else { return }
        state.clients[clientId] = nil
    }
}
