import BrokerAPI
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// Crashes and restarts (docs/reliability.md): brokerd killed with SIGKILL at random moments and
/// restarted on the same state directory, state files that cannot be used, and clean stops.
@Suite("Crash recovery: SIGKILL at random moments, unusable state files, clean stops", .serialized)
struct CrashRecoveryTests {
    /// `CRASH_CYCLES` and `CRASH_SEED` in the environment change the run (a failure prints its seed).
    static let cycles = Int(ProcessInfo.processInfo.environment["CRASH_CYCLES"] ?? "") ?? 200

    @Test(
        "200 cycles of sign-in, refresh, sign-out and query, each with brokerd SIGKILLed at a random moment (200 kills) and restarted on the same state"
    )
    func killedAtRandomMoments() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["CRASH_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)
        let run = try await CrashRun(seed: seed)
        try await run.run(cycles: Self.cycles)
    }
}

/// One crash run: a private bus, idp-sim and brokerd; a model of what the state must be; and the
/// loop that changes it, kills brokerd, and checks the state file and the restarted broker.
final class CrashRun: @unchecked Sendable {
    typealias User = (username: String, password: String)

    enum Operation: CustomStringConvertible {
        case signIn(client: String, user: String)
        case refresh(client: String)
        case signOut(client: String)
        case query(client: String)

        var client: String {
            switch self {
            case .signIn(let client, _), .refresh(let client), .signOut(let client), .query(let client): return client
            }
        }

        var kind: String {
            switch self {
            case .signIn: return "sign-in"
            case .refresh: return "refresh"
            case .signOut: return "sign-out"
            case .query: return "query"
            }
        }

        var description: String {
            switch self {
            case .signIn(let client, let user): return "sign-in \(user) from \(client)"
            default: return "\(kind) from \(client)"
            }
        }
    }

    /// What the caller saw: the broker's answer (success or a broker error) or none (killed first).
    struct Outcome {
        var replied: Bool
        var error: String?
        var queried: (current: String?, previous: String?)?
        var detail: String = ""
    }

    /// What the state must be: the device's account and what each app saw last (its next `previous`).
    struct Model {
        var current: String?
        var lastSeen: [String: String?] = [:]
    }

    let seed: UInt64
    private var random: SeededGenerator
    let directory: TemporaryDirectory
    let stateDirectory: String
    let bus: PrivateBus
    let idp: IdpSim
    private var brokerd: Brokerd
    private var apps: [String: PublicClientApplication] = [:]
    private var model = Model()
    private var deviceId: String?
    private let users: [String: User] = [
        TestUsers.alice.username: (TestUsers.alice.username, TestUsers.alice.password),
        TestUsers.bob.username: (TestUsers.bob.username, TestUsers.bob.password),
    ]
    private let clients = TestUsers.clients
    /// Per kind of operation, the kill window (ms); adjusted so that about half the kills come
    /// before the broker's reply and half after.
    private var window: [String: Double] = ["sign-in": 40, "refresh": 30, "sign-out": 20, "query": 4]
    private var stats = Stats()

    struct Stats {
        var kills = 0
        var byKind: [String: Int] = [:]
        var repliedBeforeKill = 0
        var interruptedBefore = 0
        var interruptedAfter = 0
        var viaBrokerctl = 0
        var brokerCheckCalls = 0
        var refusedByBroker = 0
    }

    init(seed: UInt64) async throws {
        self.seed = seed
        random = SeededGenerator(seed: seed)
        directory = try TemporaryDirectory()
        stateDirectory = directory.path + "/state"
        bus = try PrivateBus()
        idp = try IdpSim(in: directory)
        let (bus, idp, stateDirectory) = (bus, idp, stateDirectory)
        brokerd = try await offThePool {
            try Brokerd(bus: bus, authority: idp.authority, stateDirectory: stateDirectory, browser: "/bin/false")
        }
        for client in clients {
            apps[client] = try PublicClientApplication(
                clientId: client,
                configuration: BrokerClientConfiguration(
                    busAddress: bus.address, queryTimeout: .seconds(10), tokenTimeout: .seconds(15)))
        }
    }

    func run(cycles: Int) async throws {
        print("crash run: seed \(seed) (CRASH_SEED=\(seed) repeats it), \(cycles) cycles")
        let start = ContinuousClock.now
        // A first sign-in, not interrupted, so that there is a state file with a device id.
        _ = try await apps["mail-app"]!.signIn(
            username: TestUsers.alice.username, password: TestUsers.alice.password,
            scopes: ["User.Read"])
        model.current = TestUsers.alice.username
        deviceId = try StateFileSnapshot.readResolved(in: stateDirectory)?.deviceId
        try #require(deviceId != nil)

        for cycle in 1...cycles {
            try await runCycle(cycle)
        }
        let elapsed = ContinuousClock.now - start
        let summary = """
            crash run: \(cycles) cycles, \(stats.kills) SIGKILLs, \(stats.kills) restarts in \(String(format: "%.1f", elapsed.seconds)) s \
            (seed \(seed)); operations \(stats.byKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")), \
            \(stats.viaBrokerctl) of them through brokerctl; killed after the reply \(stats.repliedBeforeKill) \
            (\(stats.refusedByBroker) broker errors), before the reply with the state unchanged \(stats.interruptedBefore), \
            before the reply with the change already written \(stats.interruptedAfter); \
            \(stats.brokerCheckCalls) current-account checks after restarts; no state.json.broken-* file
            """
        print(summary)
    }

    private func runCycle(_ cycle: Int) async throws {
        let context = "cycle \(cycle), seed \(seed)"
        let before = try StateFileSnapshot.readResolved(in: stateDirectory)
        try #require(before != nil, "\(context): no state file")
        // What the restarted broker answered was written: the file is the model.
        try #require(
            before!.current == model.current
                && clients.allSatisfy { before!.lastSeen($0) == (model.lastSeen[$0] ?? nil) },
            "\(context): the state file is not the model \(model): \(before!)")
        let operation = choose(before!)
        let viaBrokerctl = Int.random(in: 0..<4, using: &random) == 0
        stats.byKind[operation.kind, default: 0] += 1
        if viaBrokerctl { stats.viaBrokerctl += 1 }

        // Start the operation, kill brokerd a random moment later (before, during or after it).
        let delay = Double.random(in: 0...(2 * window[operation.kind]!), using: &random)
        let outcome: Outcome
        if viaBrokerctl {
            let process = try startBrokerctl(operation)
            try await Task.sleep(for: .microseconds(Int(delay * 1000)))
            try await kill()
            outcome = try await offThePool { try Self.outcome(of: process) }
        } else {
            let app = apps[operation.client]!
            let user = users[operationUser(operation) ?? ""]
            let task = Task { await Self.call(operation, on: app, user: user) }
            try await Task.sleep(for: .microseconds(Int(delay * 1000)))
            try await kill()
            outcome = await task.value
        }
        // Keep about half the kills before the reply: shrink the window when most replies came first.
        window[operation.kind] = min(400, max(1, window[operation.kind]! * (outcome.replied ? 0.9 : 1.1)))

        // The file is whole, and it is the state before the change or the state after it.
        try #require(
            StateFileSnapshot.brokenFiles(in: stateDirectory).isEmpty,
            "\(context): \(StateFileSnapshot.brokenFiles(in: stateDirectory))")
        let after = try #require(
            try StateFileSnapshot.readResolved(in: stateDirectory), "\(context): the state file is gone")
        try #require(after.deviceId == deviceId, "\(context): the device id changed: \(after)")
        let unchanged = after.canonical() == before!.canonical()
        let changed = isAfter(operation, before: before!, after: after)
        let ending =
            outcome.replied ? "replied \(outcome.error ?? "success")" : "killed before the reply: \(outcome.detail)"
        try #require(
            unchanged || changed,
            Comment(
                rawValue:
                    "\(context): after \(operation) (\(ending)) the state is neither the one before nor the one after."
                    + "\nbefore: \(before!)\nafter:  \(after)")
        )
        try checkInvariants(after, context: context)
        if outcome.replied {
            stats.repliedBeforeKill += 1
            if outcome.error != nil { stats.refusedByBroker += 1 }
            // A reply means the change (if any) was written first.
            if outcome.error == nil {
                try #require(
                    changed,
                    Comment(
                        rawValue:
                            "\(context): \(operation) replied success but the file is not the state after it.\nbefore: "
                            + "\(before!)\nafter:  \(after)")
                )
            } else if operation.kind != "refresh" {
                try #require(
                    unchanged,
                    Comment(
                        rawValue:
                            "\(context): \(operation) was refused (\(outcome.error!)) but the state changed.\nbefore: "
                            + "\(before!)\nafter:  \(after)")
                )
            }
            if let queried = outcome.queried {
                try #require(
                    queried.current == model.current && queried.previous == (model.lastSeen[operation.client] ?? nil),
                    "\(context): \(operation) answered \(queried), the model says \(model)")
            }
        } else if unchanged {
            stats.interruptedBefore += 1
        } else {
            stats.interruptedAfter += 1
        }
        // The model follows the file: either outcome is allowed, and from now on it is the truth.
        model.current = after.current
        for client in clients { model.lastSeen[client] = after.lastSeen(client) }

        // Restart on the same state: it loads (the readiness line, nothing moved aside).
        try await restart(context: context)

        // The restarted broker tells each app what the model says: the current account and the
        // app's previous one. One app through brokerctl, some others through the library.
        let checked = clients.filter { _ in Bool.random(using: &random) }
        let viaCtl = clients.randomElement(using: &random)!
        for client in clients where client == viaCtl || checked.contains(client) {
            let seen = try await currentAccount(client, viaBrokerctl: client == viaCtl, context: context)
            stats.brokerCheckCalls += 1
            let expectedPrevious = model.lastSeen[client] ?? nil
            try #require(
                seen.current == model.current && seen.previous == expectedPrevious,
                """
                \(context): after \(operation) and a restart, \(client) got current \(seen.current ?? "none"), \
                previous \(seen.previous ?? "none"); expected current \(model.current ?? "none"), \
                previous \(expectedPrevious ?? "none")
                """
            )
            model.lastSeen[client] = seen.current
        }
    }

    // MARK: Choosing and running operations

    private func choose(_ state: StateFileSnapshot) -> Operation {
        let client = clients.randomElement(using: &random)!
        let roll = Int.random(in: 0..<100, using: &random)
        guard let current = state.current else {
            if roll < 75 { return .signIn(client: client, user: users.keys.sorted().randomElement(using: &random)!) }
            if roll < 90 { return .query(client: client) }
            return .signOut(client: client)  // NoAccount: nothing changes
        }
        let holders = clients.filter { state.refreshToken($0) != nil }
        switch roll {
        case 0..<32:
            if let holder = holders.randomElement(using: &random) { return .refresh(client: holder) }
            return .signIn(client: client, user: current)
        case 32..<57: return .signOut(client: client)
        case 57..<72: return .signIn(client: client, user: current)
        case 72..<92: return .query(client: client)
        default:
            // Someone else while the device is signed in: AccountAlreadySignedIn, nothing changes.
            return .signIn(client: client, user: users.keys.first { $0 != current }!)
        }
    }

    private func operationUser(_ operation: Operation) -> String? {
        if case .signIn(_, let user) = operation { return user }
        return nil
    }

    private static func call(_ operation: Operation, on app: PublicClientApplication, user: User?) async -> Outcome {
        do {
            switch operation {
            case .signIn:
                _ = try await app.signIn(username: user!.username, password: user!.password, scopes: ["User.Read"])
            case .refresh:
                _ = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"], forceRefresh: true))
            case .signOut:
                _ = try await app.signOut(account: nil)
            case .query:
                let seen = try await app.currentAccount()
                return Outcome(replied: true, error: nil, queried: (seen.current?.username, seen.previous?.username))
            }
            return Outcome(replied: true, error: nil)
        } catch {
            if let code = error.code { return Outcome(replied: true, error: code.rawValue, detail: error.message) }
            return Outcome(replied: false, error: error.errorName, detail: "\(error.errorName): \(error.message)")
        }
    }

    private func startBrokerctl(_ operation: Operation) throws -> CommandProcess {
        var arguments: [String]
        var stdin: String?
        switch operation {
        case .signIn(let client, let user):
            arguments = [
                "sign-in", "--client-id", client, "--username", user, "--password-stdin", "--scope", "User.Read",
            ]
            stdin = users[user]!.password + "\n"
        case .refresh(let client):
            arguments = ["token", "--client-id", client, "--scope", "User.Read", "--force-refresh"]
        case .signOut(let client):
            arguments = ["sign-out", "--client-id", client]
        case .query(let client):
            arguments = ["current-account", "--client-id", client]
        }
        return try CommandProcess(
            "brokerctl", executable: Binaries.path("brokerctl"),
            arguments: arguments + ["--json", "--address", bus.address], stdin: stdin)
    }

    private static func outcome(of process: CommandProcess) throws -> Outcome {
        let result = try process.waitForExit(timeout: .seconds(20))
        if result.status == 0 {
            var outcome = Outcome(replied: true, error: nil)
            let json = try result.json()
            if json.keys.contains("previous") {
                outcome.queried = (Self.username(json["current"]), Self.username(json["previous"]))
            }
            return outcome
        }
        let stderr = result.stderr
        let prefix = BrokerNames.errorPrefix
        if let range = stderr.range(of: prefix) {
            let name = stderr[range.upperBound...].prefix { $0.isLetter }
            return Outcome(replied: true, error: String(name), detail: stderr)
        }
        return Outcome(replied: false, error: nil, detail: stderr)
    }

    private static func username(_ value: Any?) -> String? { (value as? [String: Any])?["username"] as? String }

    // MARK: The broker

    private func kill() async throws {
        stats.kills += 1
        let process = brokerd.process
        process.signal(SIGKILL)
        _ = try await offThePool { try process.waitForExit(timeout: .seconds(10)) }
    }

    private func restart(context: String) async throws {
        let (bus, idp, stateDirectory) = (bus, idp, stateDirectory)
        do {
            brokerd = try await offThePool {
                try Brokerd(bus: bus, authority: idp.authority, stateDirectory: stateDirectory, browser: "/bin/false")
            }
        } catch {
            throw ProcessFailure("\(context): brokerd did not come back on its state: \(error)")
        }
        let log = brokerd.process.stderrText
        try #require(!log.contains("cannot be used"), "\(context): the restarted brokerd did not use its state: \(log)")
        try #require(
            StateFileSnapshot.brokenFiles(in: stateDirectory).isEmpty, "\(context): a state file was moved aside")
    }

    private func currentAccount(_ client: String, viaBrokerctl: Bool, context: String) async throws -> (
        current: String?, previous: String?
    ) {
        if viaBrokerctl {
            let address = bus.address
            let result = try await offThePool {
                try runBrokerctl(["current-account", "--client-id", client, "--json"], address: address)
            }
            try #require(result.status == 0, "\(context): brokerctl current-account failed: \(result.stderr)")
            let json: [String: Any]
            do { json = try result.json() } catch {
                throw ProcessFailure(
                    "\(context): brokerctl current-account printed no JSON: \(error); stdout "
                        + "\(result.stdout.debugDescription), stderr \(result.stderr.debugDescription)"
                )
            }
            return (Self.username(json["current"]), Self.username(json["previous"]))
        }
        let seen = try await apps[client]!.currentAccount()
        return (seen.current?.username, seen.previous?.username)
    }

    // MARK: What "after" means

    /// Whether `after` is exactly what `operation` makes of `before`: the fields it may change
    /// changed as it changes them, and nothing else moved.
    private func isAfter(_ operation: Operation, before: StateFileSnapshot, after: StateFileSnapshot) -> Bool {
        switch operation {
        case .signIn(let client, let user):
            // The device's account is the user; this app holds the user's account and tokens;
            // nothing else changed (other apps' tokens and every app's lastSeen included).
            guard before.current == nil || before.current == user else { return false }
            let fields = [client: StateFileSnapshot.tokenFields]
            return after.current == user && after.account(client) == user && after.refreshToken(client) != nil
                && after.canonical(withoutCurrent: true, without: fields)
                    == before.canonical(withoutCurrent: true, without: fields)
        case .signOut:
            // Nobody is signed in, no app holds an account or a token, every lastSeen is kept.
            guard before.current != nil else { return false }
            let fields = ["*": StateFileSnapshot.tokenFields]
            return after.current == nil && !clients.contains { after.holdsTokens($0) }
                && after.canonical(withoutCurrent: true, without: fields)
                    == before.canonical(withoutCurrent: true, without: fields)
        case .refresh(let client):
            // This app's refresh token rotated (or, refused by the provider, it and the access
            // tokens are gone); the account and everything else stay.
            let fields = [client: ["refreshToken", "accessTokens"] as Set]
            let rotated = after.refreshToken(client) != nil && after.refreshToken(client) != before.refreshToken(client)
            let dropped = after.refreshToken(client) == nil && after.accessTokenCount(client) == 0
            return (rotated || dropped) && after.account(client) == before.account(client)
                && after.canonical(without: fields) == before.canonical(without: fields)
        case .query(let client):
            // This app's lastSeen became the current account; nothing else changed.
            let fields = [client: ["lastSeen"] as Set]
            return after.lastSeen(client) == before.current
                && after.canonical(without: fields) == before.canonical(without: fields)
        }
    }

    /// What holds in every state, whole or not: signed out means no app holds anything; signed in
    /// means every app's account is the device's.
    private func checkInvariants(_ state: StateFileSnapshot, context: String) throws {
        for client in clients {
            if let current = state.current {
                try #require(
                    state.account(client) == nil || state.account(client) == current,
                    "\(context): \(client) holds \(state.account(client)!) while \(current) is signed in: \(state)")
            } else {
                try #require(
                    !state.holdsTokens(client), "\(context): \(client) holds tokens while nobody is signed in: \(state)"
                )
            }
        }
    }
}

// MARK: - State files brokerd cannot use

extension CrashRecoveryTests {
    /// A state file that is damaged, cut short, not the broker's, or open to other users is never
    /// overwritten silently: brokerd moves it aside (`state.json.broken-*`, the bytes kept), logs
    /// why, and starts signed out. A file from a newer brokerd, or a state directory of another
    /// user, stops the start instead.
    @Suite("Unusable state files: kept aside and signed out, or refused", .serialized)
    struct StateFiles {
        /// A whole, valid state with alice signed in (so "starts signed out" is visible).
        static let validState = """
            {"accounts":{"oid-alice.\(TestUsers.tenant)":\(StateFormat.alice)},"clients":{"mail-app":{"lastSeen":"oid-alice.\(TestUsers.tenant)"}},"current":\(StateFormat.alice),"deviceId":"11111111-2222-4333-8444-555555555555","version":2}
            """

        struct Variant: CustomTestStringConvertible, Sendable {
            var name: String
            var bytes: [UInt8]
            var mode: mode_t = 0o600
            /// chown the file to this uid (needs root).
            var owner: uid_t?
            var symlink = false
            /// What the log must say about it.
            var why: String
            var testDescription: String { name }
        }

        static let variants: [Variant] =
            [
                Variant(
                    name: "corrupt (binary garbage)",
                    bytes: [0x00, 0xFF, 0x7B, 0x22, 0x13, 0x37] + Array("garbage{{".utf8),
                    why: "is not valid JSON (15 bytes): it is damaged or was cut short"),
                Variant(
                    name: "truncated (the first half of a valid file)",
                    bytes: Array(validState.utf8.prefix(validState.utf8.count / 2)),
                    why: "is not valid JSON (\(validState.utf8.count / 2) bytes): it is damaged or was cut short"),
                Variant(
                    name: "empty (0 bytes)", bytes: [],
                    why: "is empty (0 bytes): it was cut short, or is not the broker's"),
                Variant(
                    name: "JSON but not a state file", bytes: Array(#"{"hello": "world"}"#.utf8),
                    why: "is not a broker state file: it has no format version"),
                Variant(
                    name: "the right version, a damaged body",
                    bytes: Array(#"{"version": 1, "deviceId": 7, "clients": []}"#.utf8),
                    why: "is damaged:"),
                Variant(
                    name: "a format version below 1",
                    bytes: Array(#"{"version": 0, "deviceId": "d", "clients": {}}"#.utf8),
                    why: "is damaged: its format version is 0; versions start at 1"),
                Variant(
                    name: "version 2 naming an account its table lacks",
                    bytes: Array(
                        #"{"version": 2, "deviceId": "d", "accounts": {}, "clients": {"mail-app": {"lastSeen": "oid-nobody.t"}}}"#
                            .utf8),
                    why:
                        #"is damaged: client "mail-app" names account "oid-nobody.t" as its lastSeen, and the accounts table has no such entry"#
                ),
                Variant(
                    name: "a single sign-on grant with a device secret but not its ID token",
                    bytes: Array(
                        #"{"version": 2, "deviceId": "d", "clients": {}, "singleSignOn": {"oid-a.t": {"anchor": "mail-app", "deviceSecret": "ds"}}}"#
                            .utf8),
                    why: "is damaged: singleSignOn[oid-a.t] has a device secret without its ID token"),
                Variant(
                    name: "a single sign-on grant without its anchor",
                    bytes: Array(
                        #"{"version": 2, "deviceId": "d", "clients": {}, "singleSignOn": {"oid-a.t": {"family": "1"}}}"#
                            .utf8),
                    why: "is damaged: singleSignOn[oid-a.t] names no anchor"),
                Variant(
                    name: "a single sign-on grant naming an app the file does not hold",
                    bytes: Array(
                        #"{"version": 2, "deviceId": "d", "clients": {}, "singleSignOn": {"oid-a.t": {"anchor": "mail-app"}}}"#
                            .utf8),
                    why:
                        "is damaged: singleSignOn[oid-a.t] names the app mail-app, which the file's clients do not hold"
                ),
                // The outside-text rule: brokerd writes no control character but tab, escaped or not.
                Variant(
                    name: "a NUL (\\u0000) in an account's name",
                    bytes: Array(validState.replacing("Alice Example", with: #"Alice\u0000Example"#).utf8),
                    why: "holds U+0000, a control character, at character 6, which brokerd never writes"),
                Variant(
                    name: "a line feed (\\n) and an escape (\\u001b) in an account's name",
                    bytes: Array(validState.replacing("Alice Example", with: #"Alice\n\u001b[2JExample"#).utf8),
                    why: "holds U+000A, a control character, at character 6, which brokerd never writes"),
                Variant(
                    name: "a raw NEL (U+0085) in a clientId",
                    bytes: Array(validState.replacing("mail-app", with: "mail\u{85}app").utf8),
                    why: "holds U+0085, a control character, at character 5, which brokerd never writes"),
                Variant(
                    name: "mode 0644 (readable by others)", bytes: Array(validState.utf8), mode: 0o644,
                    why: "has mode 644: others may read its tokens; it must be 0600"),
                Variant(
                    name: "mode 0620 (group-writable)", bytes: Array(validState.utf8), mode: 0o620,
                    why: "has mode 620: others may change it; it must be 0600"),
                Variant(
                    name: "mode 0666 (world-writable)", bytes: Array(validState.utf8), mode: 0o666,
                    why: "has mode 666: others may change it; it must be 0600"),
                Variant(
                    name: "a symbolic link to a valid file", bytes: Array(validState.utf8), symlink: true,
                    why: "is a symbolic link, not the broker's own file"),
            ]
            + (getuid() == 0
                ? [
                    Variant(
                        name: "another user's file (uid 4242)", bytes: Array(validState.utf8), owner: 4242,
                        why: "belongs to uid 4242, not to this user (uid 0): someone else wrote it")
                ] : [])

        @Test("kept aside, logged, and brokerd starts signed out", arguments: variants)
        func keptAside(_ variant: Variant) async throws {
            let env = try BrokerEnvironment()
            #expect(try env.brokerd.stop() == 0)
            let path = env.stateDirectory + "/state.json"
            try? FileManager.default.removeItem(atPath: path)
            if variant.symlink {
                let target = try env.directory.write("elsewhere.json", Self.validState)
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
            } else {
                try Data(variant.bytes).write(to: URL(fileURLWithPath: path))
                #expect(chmod(path, variant.mode) == 0)
                if let owner = variant.owner { #expect(chown(path, owner, getgid()) == 0) }
            }

            try env.restartBroker()
            let log = env.brokerd.process.stderrText
            #expect(log.contains("the saved state cannot be used; starting signed out"), "\(log)")
            #expect(log.contains(variant.why), "expected \"\(variant.why)\" in:\n\(log)")
            let broken = StateFileSnapshot.brokenFiles(in: env.stateDirectory)
            try #require(broken.count == 1, "\(broken)")
            let aside = env.stateDirectory + "/" + broken[0]
            #expect(log.contains("keptAt=\(aside)"), "\(log)")
            // The copy is the file as it was, byte for byte (for a link: the link itself).
            if variant.symlink {
                #expect(
                    (try? FileManager.default.destinationOfSymbolicLink(atPath: aside)) == env.directory.path
                        + "/elsewhere.json")
            } else {
                #expect(try Data(contentsOf: URL(fileURLWithPath: aside)) == Data(variant.bytes))
                if variant.owner == nil {
                    let mode = try FileManager.default.attributesOfItem(atPath: aside)[.posixPermissions] as? Int
                    #expect(mode == 0o600, "the copy aside is made private")
                }
            }

            // Signed out, on a new device id; and it works: a sign-in writes a new state file,
            // and the copy aside stays as it was.
            let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
            #expect(seen["current"] is NSNull && seen["previous"] is NSNull, "\(seen)")
            let device = try env.brokerctl(["device-info", "--json"]).json()
            #expect(device["deviceId"] as? String != "11111111-2222-4333-8444-555555555555")
            #expect(try env.signIn(TestUsers.bob, client: "calendar-app").status == 0)
            let state = try #require(try StateFileSnapshot.readResolved(in: env.stateDirectory))
            #expect(state.current == TestUsers.bob.username)
            #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory) == broken)
            if !variant.symlink {
                #expect(try Data(contentsOf: URL(fileURLWithPath: aside)) == Data(variant.bytes))
            }
        }

        @Test("a second unusable file is kept beside the first, never over it")
        func twoBrokenFiles() throws {
            let env = try BrokerEnvironment()
            let path = env.stateDirectory + "/state.json"
            for text in ["first damaged {", "second damaged {"] {
                #expect(try env.brokerd.stop() == 0)
                try Data(text.utf8).write(to: URL(fileURLWithPath: path))
                chmod(path, 0o600)
                try env.restartBroker()
            }
            let broken = StateFileSnapshot.brokenFiles(in: env.stateDirectory)
            #expect(broken.count == 2, "\(broken)")
            let contents = Set(
                try broken.map { try String(contentsOfFile: env.stateDirectory + "/" + $0, encoding: .utf8) })
            #expect(contents == ["first damaged {", "second damaged {"])
        }

        @Test("a file from a newer brokerd stops the start, untouched, with a message that says what to do")
        func newerFormatRefused() throws {
            let env = try BrokerEnvironment()
            #expect(try env.brokerd.stop() == 0)
            let path = env.stateDirectory + "/state.json"
            let newer = #"{"version": 99, "deviceId": "from-the-future", "clients": {}, "somethingNew": [1, 2, 3]}"#
            try Data(newer.utf8).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            Self.expectStartRefused(
                env, "a state file of format 99",
                saying: [
                    "brokerd: \(path) has format 99; this brokerd reads up to 2. Refusing to start rather than "
                        + "lose it; run the newer brokerd, or move the file away."
                ])
            #expect(try String(contentsOfFile: path, encoding: .utf8) == newer)
            #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory).isEmpty)
        }

        @Test(
            "a state directory of another user stops the start",
            .enabled(if: getuid() == 0, "needs root to give the directory to another uid"))
        func foreignDirectoryRefused() throws {
            let env = try BrokerEnvironment()
            #expect(try env.brokerd.stop() == 0)
            #expect(chown(env.stateDirectory, 4242, 4242) == 0)
            Self.expectStartRefused(
                env, "a directory of uid 4242",
                saying: [
                    "brokerd: cannot use the state directory: \(env.stateDirectory) belongs to uid 4242, not to "
                        + "this user"
                ])
        }

        /// Restarts brokerd on `env`'s state, which must stop the start: exit status 1, and each of
        /// `messages` in what it printed.
        static func expectStartRefused(_ env: BrokerEnvironment, _ what: String, saying messages: [String]) {
            do {
                try env.restartBroker()
                Issue.record("brokerd started on \(what)")
            } catch {
                let output = "\(error)"
                #expect(output.contains("exited (status 1)"), "\(output)")
                for message in messages { #expect(output.contains(message), "\(output)") }
            }
        }

        @Test("a hard-linked state file is kept aside and the file it shares keeps its mode and bytes")
        func hardLinked() throws {
            let env = try BrokerEnvironment()
            #expect(try env.brokerd.stop() == 0)
            let path = env.stateDirectory + "/state.json"
            try? FileManager.default.removeItem(atPath: path)
            // Another file of the user's that others may read (a shell profile, say): moved aside
            // and made private, state.json would have taken that file's mode with it.
            let other = try env.directory.write("profile", Self.validState)
            #expect(chmod(other, 0o644) == 0)
            #expect(link(other, path) == 0)

            try env.restartBroker()
            let log = env.brokerd.process.stderrText
            #expect(log.contains("the saved state cannot be used; starting signed out"), "\(log)")
            #expect(log.contains("\(path) has 2 hard links: another name shares the file"), "\(log)")
            let mode = try FileManager.default.attributesOfItem(atPath: other)[.posixPermissions] as? Int
            #expect(mode == 0o644, "the other file's mode was changed")
            #expect(try String(contentsOfFile: other, encoding: .utf8) == Self.validState)
            #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory).count == 1)
            let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
            #expect(seen["current"] is NSNull, "the linked file's account was not adopted: \(seen)")

            // The next save writes a file of the broker's own; the other file stays as it was.
            #expect(try env.signIn(TestUsers.bob, client: "calendar-app").status == 0)
            var info = stat()
            #expect(lstat(path, &info) == 0 && info.st_nlink == 1)
            #expect(try String(contentsOfFile: other, encoding: .utf8) == Self.validState)
        }

        @Test(
            "a state directory others can write stops the start, untouched, with the fix named",
            arguments: [0o777, 0o770, 0o1777] as [mode_t])
        func writableDirectoryRefused(_ mode: mode_t) throws {
            let env = try BrokerEnvironment()
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            #expect(try env.brokerd.stop() == 0)
            let path = env.stateDirectory + "/state.json"
            let before = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(chmod(env.stateDirectory, mode) == 0)
            let octal = String(mode, radix: 8)
            Self.expectStartRefused(
                env, "a directory of mode \(octal)",
                saying: [
                    "brokerd: cannot use the state directory: \(env.stateDirectory) is writable by others (mode "
                        + "\(octal)), so anyone could have put or replaced the files in it",
                    "then chmod 700 \(env.stateDirectory)",
                ])
            // Nothing was changed, not even the directory's mode: the person who fixes it sees it as it was.
            var info = stat()
            #expect(stat(env.stateDirectory, &info) == 0 && info.st_mode & 0o7777 == mode)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
            #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory).isEmpty)

            // The fix the message names works, and the account is still there.
            #expect(chmod(env.stateDirectory, 0o700) == 0)
            try env.restartBroker()
            #expect(
                try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(
                    TestUsers.alice.username))
        }

        @Test("a state directory others can only read is made private, and its state used")
        func readableDirectoryMadePrivate() throws {
            let env = try BrokerEnvironment()
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            #expect(try env.brokerd.stop() == 0)
            #expect(chmod(env.stateDirectory, 0o755) == 0)
            try env.restartBroker()
            var info = stat()
            #expect(stat(env.stateDirectory, &info) == 0 && info.st_mode & 0o777 == 0o700)
            #expect(
                try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(
                    TestUsers.alice.username))
        }

        @Test(
            "another user's file: skipped when not root",
            .enabled(if: getuid() != 0, "runs as root: the uid 4242 variant of keptAside covers it"))
        func foreignFileNeedsRoot() {
            print(
                "skipped: giving state.json to another uid needs root; run the tests as root to cover a foreign-owned "
                    + "state file"
            )
        }
    }
}

// MARK: - The state file's format

extension StateFileSnapshot {
    /// The state file with each client's `lastSeen` and `account` in place as whole account
    /// objects, as the checks compare it (version 2 names them by their key in `accounts`); the
    /// table and the version are left out.
    static func readResolved(in directory: String) throws -> StateFileSnapshot? {
        try read(in: directory).map { try $0.resolved() }
    }

    func resolved() throws -> StateFileSnapshot {
        var object = self.object
        let table = object["accounts"] as? [String: Any] ?? [:]
        if object["version"] as? Int ?? 0 >= 2 {
            var clients: [String: Any] = [:]
            for (id, record) in self.clients {
                var record = record
                for field in ["lastSeen", "account"] {
                    guard let reference = record[field] else { continue }
                    guard let key = reference as? String, let account = table[key] else {
                        throw ProcessFailure(
                            "\(id)'s \(field) names \(reference), which the accounts table lacks: \(self)")
                    }
                    record[field] = account
                }
                clients[id] = record
            }
            object["clients"] = clients
        }
        object["accounts"] = nil
        object["version"] = nil
        return StateFileSnapshot(object: object)
    }
}

extension CrashRecoveryTests {
    /// The state file's format (docs/reliability.md, "Crashes and restarts"): version 2 keeps each
    /// account once and the refresh tokens, never an access or ID token; a version 1 file is read
    /// and rewritten as version 2 at the next save; 10,000 clientIds load.
    @Suite("State file format: version 2, access tokens in memory only, version 1 read", .serialized)
    struct StateFormat {
        static let aliceIdentifier = "oid-alice.\(TestUsers.tenant)"
        static let alice =
            #"{"environment":"127.0.0.1","identifier":"oid-alice.\#(TestUsers.tenant)","name":"Alice Example","tenantId":"\#(TestUsers.tenant)","username":"\#(TestUsers.alice.username)"}"#

        @Test(
            "after a sign-in the refresh token is in state.json and the access and ID tokens are not; after a restart the silent call refreshes"
        )
        func accessTokensInMemoryOnly() async throws {
            let env = try BrokerEnvironment()  // --token-storage plaintext-file
            let signedIn = try env.signIn(TestUsers.alice, client: "mail-app").json()
            let accessToken = try #require(signedIn["accessToken"] as? String)
            let idToken = try #require(signedIn["idToken"] as? String)
            let identifier = try #require((signedIn["account"] as? [String: Any])?["identifier"] as? String)

            let text = try Self.stateText(env)
            #expect(!text.contains(accessToken), "an access token is in state.json: \(text)")
            // The ID token is there once, as Native SSO's subject with its device secret.
            let sso = (try StateFileSnapshot.read(in: env.stateDirectory))?.object["singleSignOn"] as? [String: Any]
            #expect((sso?[identifier] as? [String: Any])?["idToken"] as? String == idToken)
            #expect(
                text.components(separatedBy: idToken).count == 2,
                "the ID token is in state.json more than once: \(text)")
            #expect(!text.contains("accessTokens"))
            let file = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
            #expect(file.object["version"] as? Int == 2)
            #expect((file.object["accounts"] as? [String: Any])?.keys.sorted() == [identifier])
            #expect(file.clients["mail-app"]?["account"] as? String == identifier)
            let refreshToken = try #require(file.refreshToken("mail-app"))

            // In this run the access token is cached: no refresh.
            let refreshes = try await env.tokenRequests("refresh_token")
            let cached = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
            #expect(try cached.json()["accessToken"] as? String == accessToken, "\(cached.stderr)")
            #expect(try await env.tokenRequests("refresh_token") == refreshes)

            // After a restart it is gone; the first silent call refreshes with the stored refresh token.
            try env.restartBroker()
            let silent = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
            #expect(silent.status == 0, "\(silent.stderr)")
            let renewed = try #require(try silent.json()["accessToken"] as? String)
            #expect(renewed != accessToken)
            #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
            let after = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
            #expect(
                after.refreshToken("mail-app") != nil && after.refreshToken("mail-app") != refreshToken,
                "the rotated refresh token is saved")
            #expect(!(try Self.stateText(env)).contains(renewed))
            // And that one is cached again for this run.
            let again = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
            #expect(try again.json()["accessToken"] as? String == renewed)
            #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
        }

        @Test(
            "a version 1 file is read (its access tokens dropped and logged without their values) and the next save writes version 2"
        )
        func version1IsReadAndRewritten() async throws {
            let env = try BrokerEnvironment()
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            let written = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
            let refreshToken = try #require(written.refreshToken("mail-app"))
            let account = String(
                decoding: try JSONSerialization.data(
                    withJSONObject: try #require(written.object["current"]), options: [.sortedKeys]),
                as: UTF8.self)
            _ = try env.brokerd.stop()

            // The file as brokerd wrote it before version 2: whole accounts in every client, and access tokens.
            let legacyToken = "legacy-access-token-" + UUID().uuidString
            let legacyIdToken = "legacy.id-token." + UUID().uuidString
            let version1 = """
                {"clients":{"calendar-app":{"accessTokens":{},"lastSeen":\(account)},"mail-app":{"accessTokens":{"User.Read offline_access openid profile":{"accessToken":"\(legacyToken)","expiresOn":4102444800,"idToken":"\(legacyIdToken)","scopes":["User.Read","offline_access","openid","profile"]}},"account":\(account),"lastSeen":\(account),"refreshToken":"\(refreshToken)"}},"current":\(account),"deviceId":"22222222-3333-4444-8555-666666666666","version":1}
                """
            let path = env.stateDirectory + "/state.json"
            try version1.write(toFile: path, atomically: true, encoding: .utf8)
            #expect(chmod(path, 0o600) == 0)

            try env.restartBroker()
            let log = env.brokerd.process.stderrText
            #expect(
                log.contains("the state file held access tokens (format 1), which are no longer kept at rest"), "\(log)"
            )
            #expect(log.contains("accessTokens=1"), "\(log)")
            #expect(!log.contains(legacyToken) && !log.contains(legacyIdToken.split(separator: ".").last ?? ""))
            #expect(!log.contains("cannot be used"), "\(log)")

            // Read as it was: the device, the account, each app's previous account. Nothing changed, nothing written.
            let device = try env.brokerctl(["device-info", "--json"]).json()
            #expect(device["deviceId"] as? String == "22222222-3333-4444-8555-666666666666")
            let seen = try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"]).json()
            #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
            #expect((seen["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
            #expect(
                try String(contentsOfFile: path, encoding: .utf8) == version1, "a change-free query rewrote the file")

            // The dropped access token is not handed out: the silent call refreshes, and that save writes version 2.
            let refreshes = try await env.tokenRequests("refresh_token")
            let silent = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
            #expect(silent.status == 0, "\(silent.stderr)")
            #expect(try silent.json()["accessToken"] as? String != legacyToken)
            #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)

            let text = try Self.stateText(env)
            #expect(
                !text.contains(legacyToken) && !text.contains(legacyIdToken) && !text.contains("accessTokens"),
                "\(text)")
            let raw = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
            #expect(raw.object["version"] as? Int == 2)
            #expect(raw.object["deviceId"] as? String == "22222222-3333-4444-8555-666666666666")
            let keys = try #require((raw.object["accounts"] as? [String: Any])?.keys.sorted())
            #expect(keys.count == 1, "one account, written once: \(raw)")
            #expect(raw.clients["calendar-app"]?["lastSeen"] as? String == keys.first)
            #expect(raw.clients["mail-app"]?["account"] as? String == keys.first)
            let resolved = try raw.resolved()
            #expect(resolved.lastSeen("calendar-app") == TestUsers.alice.username)
            #expect(resolved.lastSeen("mail-app") == TestUsers.alice.username)
            #expect(resolved.account("mail-app") == TestUsers.alice.username)
            #expect(resolved.refreshToken("mail-app") != nil && resolved.refreshToken("mail-app") != refreshToken)

            // And version 2 loads: after a restart the apps still get their previous account.
            try env.restartBroker()
            let later = try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"]).json()
            #expect((later["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        }

        @Test(
            "10,000 clientIds of stored state: brokerd starts on them, gives each app its previous account, and writes them back whole"
        )
        func tenThousandClients() async throws {
            let env = try BrokerEnvironment()
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            let written = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
            let key = try #require((written.object["accounts"] as? [String: Any])?.keys.first)
            _ = try env.brokerd.stop()

            // The benchmark's state (benchmarks/run.py, state_with_clients): each app signed in as alice with a refresh
            // token.
            var object = written.object
            var clients = written.clients
            for index in 0..<10_000 {
                let clientId = "app-" + String(repeating: "0", count: 5 - String(index).count) + String(index)
                clients[clientId] = [
                    "lastSeen": key, "account": key, "refreshToken": "rt-\(index)-" + String(repeating: "r", count: 40),
                ]
            }
            object["clients"] = clients
            let path = env.stateDirectory + "/state.json"
            try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(
                to: URL(fileURLWithPath: path))
            #expect(chmod(path, 0o600) == 0)

            try env.restartBroker()
            let log = env.brokerd.process.stderrText
            #expect(log.contains("loaded the state file") && log.contains("clients=10001"), "\(log)")
            for clientId in ["app-00000", "app-04242", "app-09999"] {
                let seen = try env.brokerctl(["current-account", "--client-id", clientId, "--json"]).json()
                #expect(
                    (seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username,
                    "\(clientId)")
                #expect(
                    (seen["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username,
                    "\(clientId)")
            }

            // A change (a new app's first query) writes all of them back, each account once.
            let fresh = try env.brokerctl(["current-account", "--client-id", "app-new", "--json"]).json()
            #expect(fresh["previous"] is NSNull)
            let raw = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
            #expect(raw.object["version"] as? Int == 2)
            #expect(raw.clients.count == 10_002)
            #expect((raw.object["accounts"] as? [String: Any])?.count == 1)
            #expect(raw.refreshToken("app-04242") == "rt-4242-" + String(repeating: "r", count: 40))
            #expect(raw.clients["app-new"]?["lastSeen"] as? String == key)
            let bytes = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
            // About 210 bytes a client (two account keys and a refresh token); version 1 took 2 KB.
            #expect(bytes < 10_002 * 250, "\(bytes) bytes for 10,002 clients")

            try env.restartBroker()
            let again = try env.brokerctl(["current-account", "--client-id", "app-new", "--json"]).json()
            #expect((again["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        }

        @Test(
            "escapes and non-ASCII text survive a load and a save: quotes, backslashes, a tab, \\u escapes and surrogate pairs"
        )
        func escapesRoundTrip() throws {
            let env = try BrokerEnvironment()
            _ = try env.brokerd.stop()
            // The name as JSON text with every kind of escape, and what it means; a clientId and a key escaped too.
            // Tab is the one control character the outside-text rule admits; a line feed is refused (StateFiles).
            let escapedName = #"Zo\u00eb \"Q\" back\\slash tab\t \ud83d\ude00 \/ caf\u00E9 ü"#
            let name = "Zoë \"Q\" back\\slash tab\t 😀 / café ü"
            let account =
                #"{"environment":"127.0.0.1","identifier":"oid-zoe.t","name":"\#(escapedName)","tenantId":"t","username":"zoe@contoso.example"}"#
            let file =
                #"{"version":2,"deviceId":"33333333-4444-4555-8666-777777777777","current":\#(account),"accounts":{"oid-zoe.t":\#(account)},"clients":{"mail-app":{"lastSeen":"oid-zoe.t"},"caf\u0065-app":{"lastSeen":"oid\u002dzoe.t"}}}"#
            let path = env.stateDirectory + "/state.json"
            try file.write(toFile: path, atomically: true, encoding: .utf8)
            #expect(chmod(path, 0o600) == 0)

            for round in 0..<2 {
                try env.restartBroker()
                #expect(!env.brokerd.process.stderrText.contains("cannot be used"), "\(env.brokerd.process.stderrText)")
                for client in ["mail-app", "cafe-app"] {
                    let seen = try env.brokerctl(["current-account", "--client-id", client, "--json"]).json()
                    #expect(
                        (seen["current"] as? [String: Any])?["name"] as? String == name,
                        "round \(round), \(client): \(seen)")
                    #expect(
                        (seen["previous"] as? [String: Any])?["name"] as? String == name,
                        "round \(round), \(client): \(seen)")
                }
                // A change, so that the next round reads what this brokerd wrote.
                _ = try env.brokerctl(["current-account", "--client-id", "new-app-\(round)", "--json"])
                let written = try #require(try StateFileSnapshot.read(in: env.stateDirectory))
                #expect(written.object["version"] as? Int == 2)
                #expect((written.object["current"] as? [String: Any])?["name"] as? String == name)
                #expect(written.clients["cafe-app"]?["lastSeen"] as? String == "oid-zoe.t")
            }
        }

        /// The text of state.json and of its journal.
        static func stateText(_ env: BrokerEnvironment) throws -> String {
            StateOnDisk.text(in: env.stateDirectory)
        }
    }
}

// MARK: - Clean stops

extension CrashRecoveryTests {
    /// SIGTERM and SIGINT: every caller gets an answer (never a NoReply), the state is on disk,
    /// brokerd exits 0, and the name is free at once for the next broker.
    @Suite("Clean stop on SIGTERM and SIGINT", .serialized)
    struct Shutdown {
        @Test(
            "SIGTERM during a slow provider call: the call finishes and is answered, new calls are refused, exit 0, the name is free"
        )
        func sigtermWhileProviderIsSlow() async throws {
            let env = try BrokerEnvironment()
            // Discovery and keys first, so that the slow call below is the token request itself.
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
            try await env.setProviderFault("slow", count: 1, delayMs: 3000)

            let brokerd = env.brokerd.process
            let mark = brokerd.stderrLines.count
            let signIn = try env.startBrokerctl([
                "sign-in", "--client-id", "calendar-app", "--username", TestUsers.alice.username,
                "--password-stdin", "--scope", "User.Read", "--json",
            ])
            try signIn.type(TestUsers.alice.password)
            signIn.closeStdin()
            // In flight: brokerd logged the call, and the provider holds its answer for 3 s.
            try await offThePool {
                try brokerd.waitForLine(after: mark, timeout: .seconds(10), stderr: true) {
                    $0.contains("sign-in with password started")
                }
            }
            let stopAsked = ContinuousClock.now
            brokerd.signal(SIGTERM)
            try await offThePool {
                try brokerd.waitForLine(after: mark, timeout: .seconds(5), stderr: true) {
                    $0.contains("waiting for the calls in flight")
                }
            }

            // While it waits, a new call is answered at once, with an error that says why.
            let late = try env.brokerctl(["current-account", "--client-id", "notes-app"], timeout: .seconds(5))
            #expect(late.status == 1)
            #expect(
                late.stderr.contains("io.shareddevice.Broker1.Error.Cancelled: brokerd is stopping"), "\(late.stderr)")

            // The call in flight gets its real answer, then brokerd exits 0.
            let status = try await offThePool { try signIn.waitForExit(timeout: .seconds(15)) }
            #expect(status == 0, "\(signIn.allOutput)")
            #expect(!signIn.allOutput.contains("NoReply"))
            #expect(
                (try CommandResult(status: status, stdout: signIn.stdoutText, stderr: "").json()["account"]
                    as? [String: Any])?["username"] as? String
                    == TestUsers.alice.username)
            let exit = try await offThePool { try brokerd.waitForExit(timeout: .seconds(15)) }
            let took = ContinuousClock.now - stopAsked
            #expect(exit == 0, "\(brokerd.stderrText)")
            #expect(took < .seconds(8), "stopping took \(took)")
            print(
                "clean stop: SIGTERM during a 3 s provider call; the call was answered and brokerd exited 0 after "
                    + "\(String(format: "%.2f", took.seconds)) s"
            )

            // The name is free at once, and the new broker has the change the stop waited for.
            try env.restartBroker()
            let seen = try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"]).json()
            #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
            #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory).isEmpty)
        }

        @Test(
            "SIGINT during an interactive sign-in: the waiting call is cancelled at once and answered Cancelled, exit 0, the name is free"
        )
        func sigintWhileWaitingForAPerson() async throws {
            let env = try BrokerEnvironment()
            let interactive = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
            _ = try await env.browser.nextURL()  // brokerd is waiting for the person at the browser
            let brokerd = env.brokerd.process
            let stopAsked = ContinuousClock.now
            brokerd.signal(SIGINT)

            let status = try await offThePool { try interactive.waitForExit(timeout: .seconds(10)) }
            #expect(status == 1)
            #expect(
                interactive.stderrText.contains("io.shareddevice.Broker1.Error.Cancelled"), "\(interactive.allOutput)")
            #expect(!interactive.allOutput.contains("NoReply"))
            let exit = try await offThePool { try brokerd.waitForExit(timeout: .seconds(10)) }
            let took = ContinuousClock.now - stopAsked
            #expect(exit == 0, "\(brokerd.stderrText)")
            #expect(took < .seconds(3), "stopping took \(took)")

            try env.restartBroker()
            let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
            #expect(seen["current"] is NSNull)
        }

        @Test(
            "SIGTERM or SIGINT right after the readiness line is never lost: 20 starts, each stopped at once, each exits 0"
        )
        func signalRightAfterReadiness() async throws {
            let directory = try TemporaryDirectory()
            let bus = try PrivateBus()
            let stateDirectory = directory.path + "/state"
            for round in 0..<20 {
                let brokerd = try await offThePool {
                    try Brokerd(
                        bus: bus, authority: "http://127.0.0.1:9/\(TestUsers.tenant)/v2.0",
                        stateDirectory: stateDirectory,
                        browser: "/bin/false")
                }
                brokerd.process.signal(round % 2 == 0 ? SIGTERM : SIGINT)
                let status = try await offThePool { try brokerd.process.waitForExit(timeout: .seconds(10)) }
                #expect(status == 0, "round \(round): \(brokerd.process.stderrText)")
            }
        }

        @Test("a second SIGTERM ends the grace period: the slow call is cancelled and answered, exit 0 at once")
        func secondSignalHurries() async throws {
            let env = try BrokerEnvironment()
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            try await env.setProviderFault("slow", count: 1, delayMs: 20000)
            let brokerd = env.brokerd.process
            let mark = brokerd.stderrLines.count
            let refresh = try env.startBrokerctl([
                "token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh",
            ])
            try await offThePool {
                try brokerd.waitForLine(after: mark, timeout: .seconds(10), stderr: true) {
                    $0.contains("refreshing tokens")
                }
            }
            brokerd.signal(SIGTERM)
            try await offThePool {
                try brokerd.waitForLine(after: mark, timeout: .seconds(5), stderr: true) {
                    $0.contains("waiting for the calls in flight")
                }
            }
            let stopAsked = ContinuousClock.now
            brokerd.signal(SIGTERM)
            let status = try await offThePool { try refresh.waitForExit(timeout: .seconds(10)) }
            #expect(status == 1)
            #expect(refresh.stderrText.contains("io.shareddevice.Broker1.Error.Cancelled"), "\(refresh.allOutput)")
            let exit = try await offThePool { try brokerd.waitForExit(timeout: .seconds(10)) }
            #expect(exit == 0, "\(brokerd.stderrText)")
            #expect(ContinuousClock.now - stopAsked < .seconds(4))

            // The account is still signed in (the refresh never finished, nothing was lost).
            try env.restartBroker()
            let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
            #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        }
    }
}
