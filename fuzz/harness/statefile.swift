// The state file: FileStateStore.load (BrokerDaemon; StateFileFormat's reader) on whatever
// bytes state.json holds. A state it accepts must survive the round trip
// the broker makes (encode as save does, decode again, equal), and the broker must be able to
// start on it and answer its first calls (device information, current account, accounts, a
// silent token, sign-out) in both device modes without crashing: a state file is outside data
// too (older or newer brokers, other tools, a disk that lost a write).
//
// What it accepts holds no control character but tab (the outside-text rule).
//
// An input that starts with `{` is the file itself. Any other input describes a state
// (FuzzedData: clients, accounts, tokens with expiries anywhere in Int64), which the harness
// writes as brokerd's save does and then loads: mutating JSON text almost never turns a number
// into one at the edge of Int64, and that is where arithmetic on stored values breaks.
import BrokerCore
import FoundationEssentials
import Glibc

@testable import BrokerDaemon
@testable import BrokerPersistence

/// On tmpfs when there is one: rewriting a file in place on ext4 flushes it at close (auto_da_alloc),
/// which cost 5 ms an input. Named after the process; those of processes that are gone (a crash
/// skips the clean-up at exit; fork mode starts a process per job) are removed first, with the
/// `brokerd.lock` the store takes in its directory.
private let directory: String = {
    let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
    let prefix = "sdb-fuzz-state-"
    if let listing = opendir(base) {
        while let entry = readdir(listing) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard name.hasPrefix(prefix), let pid = Int32(name.dropFirst(prefix.count)),
                kill(pid, 0) != 0 && errno == ESRCH
            else { continue }
            for file in ["state.json", "brokerd.lock"] { unlink("\(base)/\(name)/\(file)") }
            rmdir("\(base)/\(name)")
        }
        closedir(listing)
    }
    let path = "\(base)/\(prefix)\(getpid())"
    guard mkdir(path, 0o700) == 0 || errno == EEXIST else { violated("cannot create \(path)") }
    atexit {
        for file in ["state.json", "brokerd.lock"] { unlink(directory + "/" + file) }
        rmdir(directory)
    }
    return path
}()
private let store = try! FileStateStore(directory: directory)

func fuzzOne(_ input: [UInt8]) {
    var bytes = input
    var described: BrokerState?
    if let first = input.first, first != UInt8(ascii: "{") {
        let state = describedState(FuzzedData(input.dropFirst()))
        bytes = StateFileFormat.encode(state).bytes
        described = state
    }
    unlink(store.path)
    let fd = open(store.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard fd >= 0 else { violated("cannot write \(store.path)") }
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { violated("cannot write \(store.path)") }
        offset += n
    }
    close(fd)

    let loaded: BrokerState?
    do {
        loaded = try store.load()
    } catch {
        return  // refused: brokerd moves such a file aside (or stops, for a newer format)
    }
    guard let state = loaded else { violated("load() found no state in an existing file") }
    // The outside-text rule: what loads holds no control character but tab, so that every string
    // of it can go on the bus (a NUL there makes libdbus refuse the whole message).
    for text in texts(of: state) where (try? OutsideText.check(text)) == nil {
        violated("a state with a control character loaded: \(text.debugDescription)")
    }
    // What is kept at rest comes back: everything but the access tokens.
    if let described, StateFileFormat.persisted(described) != state {
        violated(
            "a state brokerd saved loads as "
                + "another state")
    }

    guard let reloaded = try? StateFileFormat.decode(StateFileFormat.encode(state).bytes).state else {
        violated("a state that loaded does not load again after saving")
    }
    if reloaded != state { violated("a state changes when saved and loaded again") }

    for mode in [DeviceMode.shared, .default] { startBroker(on: state, mode: mode) }
    // Access tokens live in memory only, and come from the provider: the broker must cope with
    // any expiry there (the Int64.min trap was one).
    if let described { for mode in [DeviceMode.shared, .default] { startBroker(on: described, mode: mode) } }
}

/// Every string a state holds.
private func texts(of state: BrokerState) -> [String] {
    func account(_ account: Account?) -> [String] {
        guard let account else { return [] }
        return [account.username, account.identifier, account.tenantId, account.environment, account.name]
    }
    var texts = [state.deviceId] + account(state.current)
    for (clientId, record) in state.clients {
        texts += [clientId, record.refreshToken ?? ""] + account(record.lastSeen) + account(record.account)
    }
    for (identifier, grant) in state.singleSignOn {
        texts += [
            identifier, grant.anchorClientId, grant.family ?? "", grant.deviceSecret?.secret ?? "",
            grant.deviceSecret?.idToken ?? "",
        ]
    }
    return texts
}

/// A state the input describes: a few clients with accounts, tokens and expiries drawn from it.
private func describedState(_ source: FuzzedData) -> BrokerState {
    var data = source
    let identifiers = ["oid-1.contoso", "oid-2.contoso", "", "x"]
    func account() -> Account {
        Account(
            username: data.string(["alice@contoso.example", "bob@contoso.example", ""]),
            identifier: data.string(identifiers),
            tenantId: data.string(["contoso", ""]), environment: data.string(["login.example"]),
            name: data.string(["Alice"]))
    }
    var state = BrokerState(deviceId: data.string(["6f1c1b9e-8a1a-4c55-9d7a-1a2b3c4d5e6f", ""]))
    if data.bool() { state.current = account() }
    for _ in 0..<Int(data.byte() % 4) {
        let clientId = data.string(["mail-app", "calendar-app", "notes-app", ""])
        var record = ClientRecord()
        if data.bool() { record.lastSeen = data.bool() ? state.current : account() }
        if data.bool() { record.account = data.bool() ? state.current : account() }
        if data.bool() { record.refreshToken = data.string(["rt-1"]) }
        for _ in 0..<Int(data.byte() % 3) {
            let scopes = Scopes(data.bool() ? ["User.Read"] : [data.string(["Mail.Read", "User.Read", ""])])
            let key = data.bool() ? scopes.joined : data.string([scopes.joined])
            record.accessTokens[key] = CachedAccessToken(
                accessToken: data.string(["at-1"]), expiresOn: data.int64(),
                idToken: data.bool() ? data.string(["h.p.s"]) : nil, scopes: scopes)
        }
        state.clients[clientId] = record
    }
    for _ in 0..<Int(data.byte() % 3) {
        let secret =
            data.bool() ? DeviceSecret(secret: data.string(["ds-1", ""]), idToken: data.string(["h.p.s"])) : nil
        state.singleSignOn[data.string(identifiers)] = SingleSignOnGrant(
            anchorClientId: data.string(["mail-app", "calendar-app", ""]), deviceSecret: secret,
            family: data.bool() ? data.string(["1", ""]) : nil)
    }
    return state
}

/// The first calls a broker answers after starting on `state`.
private func startBroker(on state: BrokerState, mode: DeviceMode) {
    let broker = Broker(
        configuration: BrokerConfiguration(deviceMode: mode, brokerVersion: "fuzz"),
        provider: OfflineProvider(), store: MemoryStore(), clock: FixedClock(),
        initialState: state, logger: quietLogger, announce: { _ in })
    // "sso-app" holds nothing: its silent call goes through single sign-on on whatever grant the state has.
    let clients = Array(state.clients.keys.sorted().prefix(4)) + ["mail-app", "sso-app"]
    runBlocking {
        _ = broker.deviceInformation()
        for clientId in clients {
            _ = try? await broker.currentAccount(clientId: clientId)
            _ = try? broker.accounts(clientId: clientId)
            let cached = state.clients[clientId]?.accessTokens.values.map(\.scopes.values) ?? []
            for scopes in cached.prefix(4) + [["User.Read"]] {
                _ = try? await broker.acquireTokenSilent(
                    clientId: clientId, scopes: scopes, accountId: "", forceRefresh: false)
            }
            for identifier in state.singleSignOn.keys.sorted().prefix(2) {
                _ = try? await broker.acquireTokenSilent(
                    clientId: clientId, scopes: ["User.Read"], accountId: identifier,
                    forceRefresh: false)
            }
        }
        for clientId in clients {
            _ = try? await broker.signOut(clientId: clientId, accountId: "", fromBrowser: false)
        }
    }
}

/// A provider that cannot be reached: the broker must cope with the state alone.
private struct OfflineProvider: IdentityProvider, SignInRefusingProvider {
    var authority: String { "https://login.example/contoso/v2.0" }
    private var offline: BrokerFailure { BrokerFailure(.serverUnavailable, "offline") }
    var signInRefusal: BrokerFailure { offline }
    func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    {
        throw offline
    }
    func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome { .notOffered }
    func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome { .notOffered }
    // Discovery was read before the provider went away: single sign-on is tried with what the
    // state holds, and each exchange meets the outage.
    func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism> { [.nativeSSO] }
    func signInFlows() async throws -> [SignInFlow] { throw offline }
    var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? { [.nativeSSO] }
    func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    { throw offline }
    func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens
    { throw offline }
    func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens {
        throw offline
    }
}

/// Saves nothing to disk; the harness's own file is the input.
private struct MemoryStore: StateStore {
    func load() throws -> BrokerState? { nil }
    func save(_ state: BrokerState, revoked: Set<String>) throws {}
}
