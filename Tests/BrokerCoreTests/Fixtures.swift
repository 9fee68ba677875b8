import BrokerCore
import Locking
import Logging

/// The core's collaborators, in memory. These stand in for the provider, disk and clock only
/// in the core's unit tests; the integration tests use the real `idp-sim`, files and bus.
final class ScriptedProvider: IdentityProvider, @unchecked Sendable {
    let authority = "http://127.0.0.1:1/tenant/v2.0"
    private let lock = Locked<Void>(())
    private var _refreshCalls = 0
    private var _revoked: [String] = []
    private var rotation = 0
    var rejectRefresh = false
    /// Tokens whose revocation the provider refuses.
    var refusedRevocations: Set<String> = []
    /// When set, every refresh fails with it.
    var refreshFailure: BrokerFailure?
    /// The claims the last refresh carried.
    private(set) var lastRefreshClaims: String?
    /// Refreshes asking for these scopes are refused as beyond the grant (invalid_scope).
    var ungrantedScopes: Set<String> = []
    var users: [String: String] = ["alice@contoso.example": "alice-pw", "bob@contoso.example": "bob-pw"]
    /// Set to make refresh wait until the test opens the gate.
    var refreshGate: AsyncStream<Void>?
    let clock: TestClock

    init(clock: TestClock) { self.clock = clock }

    var refreshCalls: Int { lock.withLock { _ in _refreshCalls } }
    var revoked: [String] { lock.withLock { _ in _revoked } }

    static func account(_ username: String) -> Account {
        let oid = username.hasPrefix("alice") ? "oid-alice" : "oid-bob"
        return Account(
            username: username, identifier: "\(oid).tenant", tenantId: "tenant",
            environment: "127.0.0.1:1", name: username.hasPrefix("alice") ? "Alice" : "Bob")
    }

    func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws
        -> ProviderTokens
    {
        guard let expected = users[username] else { throw BrokerFailure(.userNotFound, "no such user") }
        guard expected == password else { throw BrokerFailure(.invalidPassword, "wrong password") }
        return tokens(for: username, clientId: clientId, scopes: scopes)
    }

    func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    {
        lock.withLock { _ in _refreshCalls += 1 }
        if let gate = refreshGate { for await _ in gate { break } }
        lock.withLock { _ in lastRefreshClaims = claims }
        if let refreshFailure { throw refreshFailure }
        if rejectRefresh { throw BrokerFailure(.interactionRequired, "refresh token revoked") }
        if !ungrantedScopes.isDisjoint(with: scopes.values) {
            throw BrokerFailure(.interactionRequired, "not consented", refreshTokenStillValid: true)
        }
        let username = refreshToken.components(separatedBy: "|")[1]
        return tokens(for: username, clientId: clientId, scopes: scopes)
    }

    func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome {
        let value =
            switch token {
            case .refreshToken(let value), .deviceSecret(let value): value
            }
        lock.withLock { _ in _revoked.append(value) }
        if refusedRevocations.contains(value) { throw BrokerFailure(.accessDenied, "refused by the script") }
        return .done
    }

    func startCodeSignIn(clientId: String, username: String) async throws -> ProviderCodeChallenge {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    func resendCode(clientId: String, continuationToken: String) async throws -> ProviderCodeChallenge {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    func submitCode(clientId: String, continuationToken: String, code: String, scopes: Scopes) async throws
        -> ProviderTokens
    {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    private var _interactiveRequests: [InteractiveRequest] = []
    var interactiveRequests: [InteractiveRequest] { lock.withLock { _ in _interactiveRequests } }
    func signInInteractively(clientId: String, scopes: Scopes, request: InteractiveRequest) async throws
        -> ProviderTokens
    {
        lock.withLock { _ in _interactiveRequests.append(request) }
        throw BrokerFailure(.notSupported, "not scripted")
    }
    /// What ending the browser session does: nil offers no end_session_endpoint; a failure throws it.
    var endSession: Result<EndpointOutcome, BrokerFailure> = .success(.notOffered)
    private var _endSessionCalls = 0
    var endSessionCalls: Int { lock.withLock { _ in _endSessionCalls } }
    func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome {
        lock.withLock { _ in _endSessionCalls += 1 }
        return try endSession.get()
    }

    // The device authorization grant, scripted: the first poll is pending, the second signs
    // `deviceUser` in (nil: every poll is pending).
    var deviceUser: String? = "alice@contoso.example"
    private var devicePolls = 0
    func startDeviceSignIn(clientId: String, scopes: Scopes) async throws -> DeviceAuthorizationGrant {
        DeviceAuthorizationGrant(
            deviceCode: "device-code-1", userCode: "BCDFGHJK", verificationUri: "https://login.example/device",
            verificationUriComplete: nil, expiresIn: 900, interval: 1)
    }
    func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> SignInPoll {
        let polls = lock.withLock { _ in
            devicePolls += 1
            return devicePolls
        }
        guard polls >= 2, let user = deviceUser else { return .pending }
        return .tokens(tokens(for: user, clientId: clientId, scopes: scopes))
    }

    // Approval on a phone (CIBA), scripted: the first poll is pending, the second signs the
    // user named in (nil `phoneAnswer`: every poll is pending; a failure: the phone's refusal).
    var phoneAnswer: BrokerFailure? = nil
    var phoneNeverAnswers = false
    private var phonePolls = 0
    private(set) var phoneRequests: [(loginHint: String, bindingMessage: String)] = []
    func startPhoneApproval(clientId: String, loginHint: String, bindingMessage: String, scopes: Scopes) async throws
        -> PhoneApprovalRequest
    {
        guard users[loginHint] != nil else { throw BrokerFailure(.userNotFound, "no such user") }
        lock.withLock { _ in phoneRequests.append((loginHint, bindingMessage)) }
        return PhoneApprovalRequest(authRequestId: "auth-req|\(loginHint)", expiresIn: 120, interval: 1)
    }
    func pollPhoneApproval(clientId: String, authRequestId: String, scopes: Scopes) async throws -> SignInPoll {
        let polls = lock.withLock { _ in
            phonePolls += 1
            return phonePolls
        }
        guard polls >= 2, !phoneNeverAnswers else { return .pending }
        if let phoneAnswer { throw phoneAnswer }
        let user = authRequestId.components(separatedBy: "|")[1]
        return .tokens(tokens(for: user, clientId: clientId, scopes: scopes))
    }

    // Single sign-on, scripted: `singleSignOn` is what discovery advertises; `deviceSecrets`
    // issues a device secret with every sign-in, `family` a family with every refresh token.
    var singleSignOn: Set<SingleSignOnMechanism> = []
    var deviceSecrets = false
    var family: String?
    /// Client ids the provider refuses single sign-on to.
    var refusedClients: Set<String> = []
    /// Set to make single sign-on requests wait until the test opens the gate.
    var exchangeGate: AsyncStream<Void>?

    /// Makes the provider offer `mechanism` as a real one would: in discovery, or in its token responses.
    func offer(_ mechanism: SingleSignOnMechanism) {
        switch mechanism {
        case .nativeSSO:
            singleSignOn.insert(.nativeSSO)
            deviceSecrets = true
        case .familyRefreshToken: family = "1"
        case .tokenExchange: singleSignOn.insert(.tokenExchange)
        }
    }
    private var _exchanges: [String] = []
    /// "<mechanism>:<clientId>" per single sign-on request, in order.
    var exchanges: [String] { lock.withLock { _ in _exchanges } }

    private var discovered = false
    /// What ``signInFlows()`` answers; reading it reads discovery, as the real provider does.
    var flows: [SignInFlow] = SignInFlow.allCases

    func signInFlows() async throws -> [SignInFlow] {
        lock.withLock { _ in discovered = true }
        return flows
    }

    func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism> {
        lock.withLock { _ in discovered = true }
        return singleSignOn
    }
    var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? {
        lock.withLock { _ in discovered ? singleSignOn : nil }
    }

    func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    {
        try await exchange(.nativeSSO, clientId: clientId, credential: deviceSecret.secret, scopes: scopes)
    }
    func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens
    {
        try await exchange(.familyRefreshToken, clientId: clientId, credential: refreshToken, scopes: scopes)
    }
    func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens {
        let value =
            switch subject {
            case .accessToken(let value), .refreshToken(let value): value
            }
        return try await exchange(.tokenExchange, clientId: clientId, credential: value, scopes: scopes)
    }

    /// Credentials name their user: "ds-N|<username>", "rt-N|<username>|<client>", access tokens "at-N|<username>".
    private func exchange(_ mechanism: SingleSignOnMechanism, clientId: String, credential: String, scopes: Scopes)
        async throws -> ProviderTokens
    {
        lock.withLock { _ in _exchanges.append("\(mechanism.rawValue):\(clientId)") }
        if refusedClients.contains(clientId) || revoked.contains(credential) {
            throw BrokerFailure(.interactionRequired, "refused")
        }
        // Held after the checks: the provider granted the request, its answer is on the way.
        if let gate = exchangeGate { for await _ in gate { break } }
        return tokens(for: credential.components(separatedBy: "|")[1], clientId: clientId, scopes: scopes)
    }

    private func tokens(for username: String, clientId: String, scopes: Scopes) -> ProviderTokens {
        let n = lock.withLock { _ in
            rotation += 1
            return rotation
        }
        return ProviderTokens(
            accessToken: "at-\(n)|\(username)", expiresOn: clock.now() + 3600,
            refreshToken: "rt-\(n)|\(username)|\(clientId)", idToken: "id-\(n)",
            grantedScopes: scopes, account: Self.account(username),
            deviceSecret: deviceSecrets ? "ds-\(n)|\(username)" : nil, family: family)
    }
}

extension String {
    func components(separatedBy separator: Character) -> [String] { split(separator: separator).map(String.init) }
}

final class MemoryStore: StateStore, @unchecked Sendable {
    private let lock = Locked<Void>(())
    private var _saved: BrokerState?
    private var _saves = 0
    private var _revokedBySave: [Set<String>] = []
    private var _timeline: [String] = []
    var failWrites = false

    var saved: BrokerState? { lock.withLock { _ in _saved } }
    var saves: Int { lock.withLock { _ in _saves } }
    /// What each save was told the provider revoked (``StateStore``'s `revoked`).
    var revokedBySave: [Set<String>] { lock.withLock { _ in _revokedBySave } }
    /// "save", "sync" and (recorded by the harness) "announce", in the order they happened.
    var timeline: [String] { lock.withLock { _ in _timeline } }

    func load() throws -> BrokerState? { saved }
    func save(_ state: BrokerState, revoked: Set<String>) throws {
        struct DiskFull: Error {}
        if failWrites { throw DiskFull() }
        lock.withLock { _ in
            _saved = state
            _saves += 1
            _revokedBySave.append(revoked)
            _timeline.append("save")
        }
    }
    func sync() throws { note("sync") }
    func note(_ event: String) { lock.withLock { _ in _timeline.append(event) } }
}

final class TestClock: WallClock, @unchecked Sendable {
    private let lock = Locked<Int64>(1_800_000_000)
    func now() -> Int64 { lock.withLock { $0 } }
    func advance(_ seconds: Int64) { lock.withLock { $0 += seconds } }
}

final class ChangeRecorder: @unchecked Sendable {
    private let lock = Locked<[DeviceAccountChange]>([])
    var changes: [DeviceAccountChange] { lock.withLock { $0 } }
    func record(_ change: DeviceAccountChange) { lock.withLock { $0.append(change) } }
}

final class WarningRecorder: @unchecked Sendable {
    private let lock = Locked<[ShiftWarning]>([])
    var warnings: [ShiftWarning] { lock.withLock { $0 } }
    func record(_ warning: ShiftWarning) { lock.withLock { $0.append(warning) } }
}

/// Every announcement, as the core hands it over: one change's events together.
final class AnnouncementRecorder: @unchecked Sendable {
    private let lock = Locked<[[BrokerEvent]]>([])
    var announcements: [[BrokerEvent]] { lock.withLock { $0 } }
    func record(_ events: [BrokerEvent]) { lock.withLock { $0.append(events) } }
}

struct Harness {
    let clock: TestClock
    let provider: ScriptedProvider
    let store = MemoryStore()
    let changes = ChangeRecorder()
    let warnings = WarningRecorder()
    let announcements = AnnouncementRecorder()
    let broker: Broker

    init(
        mode: DeviceMode = .shared, knownClients: Set<String>? = nil, state: BrokerState? = nil,
        browserSignOut: BrowserSignOutPolicy? = nil, callers: any CallerDirectory = EveryCallerConnected(),
        maxClients: Int = BrokerConfiguration.defaultMaxClients, defaultScopes: [String: [String]] = [:],
        idleSignOut: IdleSignOut? = nil, clock: TestClock = TestClock(),
        cleaner: any DeviceCleaner = NothingToClean()
    ) {
        self.clock = clock
        provider = ScriptedProvider(clock: clock)
        let changes = self.changes
        let store = self.store
        let warnings = self.warnings
        let announcements = self.announcements
        broker = Broker(
            configuration: BrokerConfiguration(
                deviceMode: mode, brokerVersion: "test", tenantId: "tenant",
                knownClientIds: knownClients, browserSignOut: browserSignOut, maxClients: maxClients,
                idleSignOut: idleSignOut, defaultScopes: defaultScopes),
            provider: provider, store: store, clock: clock,
            initialState: state ?? BrokerState(deviceId: "device-1"),
            logger: Logger(label: "test"), callers: callers, cleaner: cleaner,
            announce: { events in
                announcements.record(events)
                for event in events {
                    switch event {
                    case .accountChanged(let change):
                        store.note("announce")
                        changes.record(change)
                    case .shiftWarning(let warning): warnings.record(warning)
                    case .signInProgress: break
                    }
                }
            })
    }

    func signIn(_ user: String = "alice@contoso.example", client: String = "mail", scopes: [String] = ["User.Read"])
        async throws -> AppTokens
    {
        let password = user.hasPrefix("alice") ? "alice-pw" : "bob-pw"
        return try await broker.signInWithPassword(clientId: client, username: user, password: password, scopes: scopes)
    }
}

/// The code a `BrokerFailure` thrown by `body` carries, or nil when it succeeded.
func failureCode(_ body: () async throws -> Void) async -> BrokerErrorCode? {
    do {
        try await body()
        return nil
    } catch let failure as BrokerFailure {
        return failure.code
    } catch {
        return .serverError
    }
}

/// Callers as a test says: these have left the bus; every caller is the one process.
struct ScriptedCallers: CallerDirectory {
    var departed: Set<String> = []
    var process = "process 1"
    /// The process and program of each caller named here; `process` and no program for the others.
    var processes: [String: String] = [:]
    var programs: [String: String] = [:]
    func isConnected(_ owner: String) async -> Bool { !departed.contains(owner) }
    func groups(of owner: String) -> CallerGroups {
        CallerGroups(process: processes[owner] ?? process, program: programs[owner])
    }
}
