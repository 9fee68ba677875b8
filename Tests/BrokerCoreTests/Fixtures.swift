import BrokerCore
import Logging
import Synchronization

/// The core's collaborators, in memory. These stand in for the provider, disk and clock only
/// in the core's unit tests; the integration tests use the real `idp-sim`, files and bus.
final class ScriptedProvider: IdentityProvider, @unchecked Sendable {
    let authority = "http://127.0.0.1:1/tenant/v2.0"
    private let lock = Mutex<Void>(())
    private var _refreshCalls = 0
    private var _revoked: [String] = []
    private var rotation = 0
    var rejectRefresh = false
    var users: [String: String] = ["alice@contoso.example": "alice-pw", "bob@contoso.example": "bob-pw"]
    /// Set to make refresh wait until the test opens the gate.
    var refreshGate: AsyncStream<Void>?
    let clock: TestClock

    init(clock: TestClock) { self.clock = clock }

    var refreshCalls: Int { lock.withLock { _ in _refreshCalls } }
    var revoked: [String] { lock.withLock { _ in _revoked } }

    static func account(_ username: String) -> Account {
        let oid = username.hasPrefix("alice") ? "oid-alice" : "oid-bob"
        return Account(username: username, identifier: "\(oid).tenant", tenantId: "tenant",
                       environment: "127.0.0.1:1", name: username.hasPrefix("alice") ? "Alice" : "Bob")
    }

    func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws -> ProviderTokens {
        guard let expected = users[username] else { throw BrokerFailure(.userNotFound, "no such user") }
        guard expected == password else { throw BrokerFailure(.invalidPassword, "wrong password") }
        return tokens(for: username, clientId: clientId, scopes: scopes)
    }

    func refresh(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens {
        lock.withLock { _ in _refreshCalls += 1 }
        if let gate = refreshGate { for await _ in gate { break } }
        if rejectRefresh { throw BrokerFailure(.interactionRequired, "refresh token revoked") }
        let username = refreshToken.components(separatedBy: "|")[1]
        return tokens(for: username, clientId: clientId, scopes: scopes)
    }

    func revoke(clientId: String, refreshToken: String) async throws -> EndpointOutcome {
        lock.withLock { _ in _revoked.append(refreshToken) }
        return .done
    }

    func startCodeSignIn(clientId: String, username: String) async throws -> CodeChallenge {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    func resendCode(clientId: String, continuationToken: String) async throws -> CodeChallenge {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    func submitCode(clientId: String, continuationToken: String, code: String, scopes: Scopes) async throws -> ProviderTokens {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    func signInInteractively(clientId: String, scopes: Scopes, request: InteractiveRequest) async throws -> ProviderTokens {
        throw BrokerFailure(.notSupported, "not scripted")
    }
    func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome { .notOffered }

    private func tokens(for username: String, clientId: String, scopes: Scopes) -> ProviderTokens {
        let n = lock.withLock { _ in rotation += 1; return rotation }
        return ProviderTokens(accessToken: "at-\(n)", expiresOn: clock.now() + 3600,
                              refreshToken: "rt-\(n)|\(username)|\(clientId)", idToken: "id-\(n)",
                              grantedScopes: scopes, account: Self.account(username))
    }
}

extension String {
    func components(separatedBy separator: Character) -> [String] { split(separator: separator).map(String.init) }
}

final class MemoryStore: StateStore, @unchecked Sendable {
    private let lock = Mutex<Void>(())
    private var _saved: BrokerState?
    private var _saves = 0
    private var _timeline: [String] = []
    var failWrites = false

    var saved: BrokerState? { lock.withLock { _ in _saved } }
    var saves: Int { lock.withLock { _ in _saves } }
    /// "save", "sync" and (recorded by the harness) "announce", in the order they happened.
    var timeline: [String] { lock.withLock { _ in _timeline } }

    func load() throws -> BrokerState? { saved }
    func save(_ state: BrokerState) throws {
        struct DiskFull: Error {}
        if failWrites { throw DiskFull() }
        lock.withLock { _ in _saved = state; _saves += 1; _timeline.append("save") }
    }
    func sync() throws { note("sync") }
    func note(_ event: String) { lock.withLock { _ in _timeline.append(event) } }
}

final class TestClock: WallClock, @unchecked Sendable {
    private let lock = Mutex<Int64>(1_800_000_000)
    func now() -> Int64 { lock.withLock { $0 } }
    func advance(_ seconds: Int64) { lock.withLock { $0 += seconds } }
}

final class ChangeRecorder: @unchecked Sendable {
    private let lock = Mutex<[AccountChange]>([])
    var changes: [AccountChange] { lock.withLock { $0 } }
    func record(_ change: AccountChange) { lock.withLock { $0.append(change) } }
}

struct Harness {
    let clock = TestClock()
    let provider: ScriptedProvider
    let store = MemoryStore()
    let changes = ChangeRecorder()
    let broker: Broker

    init(mode: DeviceMode = .shared, knownClients: Set<String>? = nil, state: BrokerState? = nil) {
        provider = ScriptedProvider(clock: clock)
        let changes = self.changes
        let store = self.store
        broker = Broker(
            configuration: BrokerConfiguration(deviceMode: mode, brokerVersion: "test", tenantId: "tenant",
                                               knownClientIds: knownClients),
            provider: provider, store: store, clock: clock,
            initialState: state ?? BrokerState(deviceId: "device-1"),
            logger: Logger(label: "test"), onAccountChange: { store.note("announce"); changes.record($0) })
    }

    func signIn(_ user: String = "alice@contoso.example", client: String = "mail", scopes: [String] = ["User.Read"]) async throws -> TokenResult {
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
