import BrokerAPI
import DBus
import Foundation
import Locking
import TestSupport
import Testing

/// Hostile and careless callers: every method of the broker's interface and of the
/// standard ones, called through a real D-Bus client on a private bus against the real brokerd
/// and idp-sim, with thousands of random and malformed argument sets. Every call must get a reply
/// in time, every call that must be refused is, and the broker's state stays exactly as it was.
///
/// Seeded and reproducible: the seed is printed; `BUS_FUZZ_SEED=N` repeats a run,
/// `BUS_FUZZ_CALLS=N` changes its length (default 10,000), `BUS_FUZZ_ONLY=I,J` replays single calls.
@Suite("Bus fuzzing: hostile and careless callers", .serialized)
struct BusFuzzTests {
    /// Calls between two checks of the broker's state.
    static let batch = 500
    /// Calls in flight at once (pipelined on one connection).
    static let inFlight = 8
    /// The bound on every call's reply.
    static let callTimeout: Duration = .seconds(10)

    @Test(
        "10,000 random and malformed calls: each answered in time, each bad one refused, nothing changed, brokerd alive"
    )
    func randomCalls() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["BUS_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let count = environment["BUS_FUZZ_CALLS"].flatMap { Int($0) } ?? 10_000
        let only = environment["BUS_FUZZ_ONLY"].map { $0.split(separator: ",").compactMap { Int($0) } }
        print(
            "bus fuzz: seed \(seed), \(only.map { "calls \($0)" } ?? "\(count) calls") (BUS_FUZZ_SEED=\(seed) repeats "
                + "this run)"
        )

        let run = try await FuzzedBroker.start()
        defer { run.close() }
        let generator = FuzzGenerator(seed: seed, context: run.context)
        var figures = FuzzFigures()
        let started = ContinuousClock.now

        let indices = only ?? Array(0..<count)
        var position = 0
        var checks = 0
        var stateProblems: [String] = []
        while position < indices.count {
            let batch = Array(indices[position..<min(position + Self.batch, indices.count)])
            position += batch.count
            for (call, outcome, latency) in await run.perform(
                batch.map(generator.call), inFlight: Self.inFlight, timeout: Self.callTimeout)
            {
                figures.record(call, outcome, latency)
                if only != nil { print("bus fuzz: \(call.description)\n    -> \(outcome)") }
            }
            checks += 1
            let changes = await run.checkUnchanged()
            if !changes.isEmpty {
                stateProblems = changes.map { "after calls up to #\(batch.last ?? 0): \($0)" }
                break
            }
        }
        let elapsed = ContinuousClock.now - started
        print(figures.report(seed: seed, elapsed: elapsed))
        print(
            "bus fuzz: \(checks) checks of the broker's state, every \(Self.batch) calls: "
                + "\(stateProblems.isEmpty ? "unchanged" : "CHANGED")"
        )
        for problem in stateProblems { Issue.record("\(problem)\n(BUS_FUZZ_SEED=\(seed) repeats this run)") }
        for problem in figures.problems.prefix(30) {
            Issue.record("\(problem)\n(BUS_FUZZ_SEED=\(seed) repeats this run)")
        }
        #expect(figures.problems.isEmpty, "\(figures.problems.count) calls got a wrong answer; seed \(seed)")
        #expect(figures.calls == indices.count, "only \(figures.calls) of \(indices.count) calls ran")
        #expect(figures.slowest.0 < Self.callTimeout)
        #expect(run.brokerd.isRunning)
    }

    @Test("the limits are exact, counted in bytes: 256 for ids, 4096 for usernames and passwords, 64 scopes of 256")
    func limitsAreExact() async throws {
        let run = try await FuzzedBroker.start()
        defer { run.close() }
        let bob = TestUsers.bob
        func s(_ text: String) -> DBusValue { .string(text) }
        func repeated(_ piece: String, bytes: Int) -> String {
            String(repeating: piece, count: bytes / piece.utf8.count)
                + String(repeating: "x", count: bytes % piece.utf8.count)
        }
        let noOptions = DBusValue.vardict([:])
        let cases: [(String, [DBusValue], String)] = [
            // clientId: 256 bytes is well-formed (and unknown here), 257 is not.
            (Broker1Method.getCurrentAccount.rawValue, [s(repeated("a", bytes: 256))], "UnknownClient"),
            (Broker1Method.getCurrentAccount.rawValue, [s(repeated("a", bytes: 257))], "InvalidArgument"),
            // username: 4096 bytes passes (then the empty password is refused), 4097 does not; bytes, not characters.
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(repeated("u", bytes: 4096)), s(""), .strings([])], "InvalidArgument"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(repeated("u", bytes: 4097)), s(""), .strings([])], "InvalidUsername"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(repeated("é", bytes: 4096)), s(""), .strings([])], "InvalidArgument"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(repeated("é", bytes: 4098)), s(""), .strings([])], "InvalidUsername"
            ),
            // password: 4096 bytes passes (bob is then refused: alice holds the device), 4097 does not.
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(bob.username), s(repeated("p", bytes: 4096)), .strings([])], "AccountAlreadySignedIn"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(bob.username), s(repeated("p", bytes: 4097)), .strings([])], "InvalidArgument"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(bob.username), s(repeated("ü", bytes: 4098)), .strings([])], "InvalidArgument"
            ),
            // scopes: 64 of 256 bytes pass, a 65th or a 257-byte one does not.
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(bob.username), s("pw"), .strings((0..<64).map { repeated("s\($0)-", bytes: 256) })],
                "AccountAlreadySignedIn"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(bob.username), s("pw"), .strings((0..<65).map { "s\($0)" })], "InvalidArgument"
            ),
            (
                Broker1Method.signInWithPassword.rawValue,
                [s("mail-app"), s(bob.username), s("pw"), .strings(["User.Read", repeated("s", bytes: 257)])],
                "InvalidArgument"
            ),
            // accountId: 256 bytes is well-formed (and not signed in), 257 is not.
            (
                Broker1Method.acquireTokenSilent.rawValue,
                [s("mail-app"), .strings([]), s(repeated("i", bytes: 256)), noOptions], "NoAccount"
            ),
            (
                Broker1Method.acquireTokenSilent.rawValue,
                [s("mail-app"), .strings([]), s(repeated("i", bytes: 257)), noOptions], "InvalidArgument"
            ),
            (Broker1Method.signOut.rawValue, [s("mail-app"), s(repeated("i", bytes: 256)), noOptions], "NoAccount"),
            (
                Broker1Method.signOut.rawValue, [s("mail-app"), s(repeated("i", bytes: 257)), noOptions],
                "InvalidArgument"
            ),
            // flowId: 256 bytes is well-formed (and unknown), 257 is not; a code is 1 to 64 letters or digits.
            (
                Broker1Method.submitCode.rawValue, [s(repeated("f", bytes: 256)), s(repeated("1", bytes: 64))],
                "FlowNotFound"
            ),
            (Broker1Method.submitCode.rawValue, [s(repeated("f", bytes: 257)), s("12345678")], "InvalidArgument"),
            (Broker1Method.submitCode.rawValue, [s("flow"), s(repeated("1", bytes: 65))], "InvalidCode"),
            (Broker1Method.resendCode.rawValue, [s(repeated("f", bytes: 256))], "FlowNotFound"),
            (Broker1Method.cancelSignIn.rawValue, [s(repeated("f", bytes: 257))], "InvalidArgument"),
        ]
        for (member, arguments, expected) in cases {
            let outcome = await run.call(member, arguments)
            let shown = FuzzCall.describe(arguments)
            switch outcome {
            case .success(let values): Issue.record("\(member)(\(shown)) succeeded: \(FuzzCall.describe(values))")
            case .failure(let error): #expect(error.name == Fuzz.broker(expected), "\(member)(\(shown)): \(error)")
            }
        }
        let problems = await run.checkUnchanged()
        #expect(problems.isEmpty, "\(problems)")
    }

    /// A D-Bus string must be valid UTF-8, and libdbus never sends one that is not, so these
    /// messages are written to the socket by hand: the bus daemon must drop such a sender before
    /// anything reaches brokerd. Noncharacters (U+FFFE, U+FDD0, U+10FFFF) are valid UTF-8 for
    /// libdbus: those are delivered, and the broker must refuse them as it refuses any bad clientId.
    @Test("invalid UTF-8 never reaches brokerd; noncharacters do, and are refused")
    func invalidUTF8() async throws {
        let run = try await FuzzedBroker.start()
        defer { run.close() }
        let invalid: [[UInt8]] = [
            // Bad continuations, overlong.
            [0xC3, 0x28], [0xA0, 0xA1], [0xE2, 0x28, 0xA1], [0xF0, 0x90, 0x28, 0xBC], [0xC0, 0xAF],
            // A surrogate, beyond U+10FFFF, bytes never in UTF-8.
            [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xFF], [0xFE, 0xFF], [0x6D, 0x61, 0x69, 0x6C, 0x80],
        ]
        for bytes in invalid {
            let outcome = try await offThePool {
                try RawBusClient.call(
                    address: run.environment.bus.address, member: Broker1Method.getCurrentAccount.rawValue,
                    stringBytes: bytes)
            }
            #expect(outcome == .droppedByBus, "\(bytes.map { String($0, radix: 16) }): \(outcome)")
        }
        let noncharacters: [[UInt8]] = [[0xEF, 0xBF, 0xBE], [0xEF, 0xB7, 0x90], [0xF4, 0x8F, 0xBF, 0xBF]]
        for bytes in noncharacters {
            let outcome = try await offThePool {
                try RawBusClient.call(
                    address: run.environment.bus.address, member: Broker1Method.getCurrentAccount.rawValue,
                    stringBytes: bytes)
            }
            #expect(
                outcome == .error(Fuzz.broker("InvalidArgument")), "\(bytes.map { String($0, radix: 16) }): \(outcome)")
        }
        let problems = await run.checkUnchanged()
        #expect(problems.isEmpty, "\(problems)")
    }
}

// MARK: - The broker under fuzz

/// The names of the signals seen, filled by a task that reads the subscription.
final class SignalLog: Sendable {
    let names = Locked<[String]>([])
}

/// brokerd with alice signed in, a client connection to it, and what its state looked like
/// before the first fuzzed call.
final class FuzzedBroker: @unchecked Sendable {
    let environment: BrokerEnvironment
    let connection: DBusConnection
    let context: FuzzContext
    private let configDirectory: TemporaryDirectory
    private let stateFile: [UInt8]
    private let token: String
    private let providerStats: Data
    private let outboxCount: Int
    /// Signals the broker emitted since the snapshot (AccountChanged, PropertiesChanged): none may come.
    private let signalsSeen = SignalLog()
    private let signalWatch: Task<Void, Never>

    var brokerd: ChildProcess { environment.brokerd.process }
    static let clients = TestUsers.clients

    private init(
        environment: BrokerEnvironment, connection: DBusConnection, context: FuzzContext,
        configDirectory: TemporaryDirectory,
        stateFile: [UInt8], token: String, providerStats: Data, outboxCount: Int, signals: AsyncStream<DBusSignal>
    ) {
        self.environment = environment
        self.connection = connection
        self.context = context
        self.configDirectory = configDirectory
        self.stateFile = stateFile
        self.token = token
        self.providerStats = providerStats
        self.outboxCount = outboxCount
        let seen = signalsSeen
        signalWatch = Task {
            for await signal in signals { seen.names.withLock { $0.append("\(signal.interface).\(signal.member)") } }
        }
    }

    /// Starts idp-sim and brokerd (its configuration lists the three test apps, so other clientIds
    /// are unknown), signs alice in with mail-app, lets every app see her once, and takes the snapshot.
    static func start() async throws -> FuzzedBroker {
        let configDirectory = try TemporaryDirectory()
        let config = try configDirectory.write(
            "broker.json",
            """
            {"clients": [\(clients.map { "{\"clientId\": \"\($0)\"}" }.joined(separator: ", "))]}
            """)
        let environment = try await offThePool { try BrokerEnvironment(brokerArguments: ["--config", config]) }
        let signIn = try await offThePool { try environment.signIn(TestUsers.alice, client: "mail-app") }
        guard signIn.status == 0 else { throw ProcessFailure("signing alice in failed: \(signIn.stderr)") }
        let connection = try await offThePool { try DBusConnection(address: environment.bus.address) }

        func call(_ interface: String, _ member: String, _ arguments: [DBusValue] = [], path: String = Fuzz.path)
            async throws -> [DBusValue]
        {
            try await connection.call(
                destination: Fuzz.service, path: path, interface: interface, member: member,
                arguments: arguments, timeout: .seconds(10))
        }
        // Every app sees alice once, so that from now on GetCurrentAccount changes nothing.
        for client in clients {
            _ = try await call(Fuzz.interface, Broker1Method.getCurrentAccount.rawValue, [.string(client)])
        }
        let current = try await call(Fuzz.interface, Broker1Method.getCurrentAccount.rawValue, [.string("mail-app")])
        guard current.count == 2, current[0] == current[1], let alice = current[0].vardict,
            let accountId = alice["identifier"]?.string,
            alice["username"]?.string == TestUsers.alice.username
        else { throw ProcessFailure("GetCurrentAccount after sign-in answered \(current)") }
        for client in clients {
            let seen = try await call(Fuzz.interface, Broker1Method.getCurrentAccount.rawValue, [.string(client)])
            guard seen == current else { throw ProcessFailure("\(client) sees \(seen), mail-app \(current)") }
        }
        let silent: [DBusValue] = [.string("mail-app"), .strings(["User.Read"]), .string(""), .vardict([:])]
        let token =
            try await call(Fuzz.interface, Broker1Method.acquireTokenSilent.rawValue, silent).first?.vardict?[
                "accessToken"]?.string ?? ""
        guard !token.isEmpty,
            try await call(Fuzz.interface, Broker1Method.acquireTokenSilent.rawValue, silent).first?.vardict?[
                "accessToken"]?.string == token
        else { throw ProcessFailure("no stable silent token for mail-app") }

        var introspection: [String: Result<[DBusValue], DBusError>] = [:]
        for path in Fuzz.paths {
            do {
                introspection[path] = .success(try await call(Fuzz.introspectable, "Introspect", path: path))
            } catch let error as DBusError {
                introspection[path] = .failure(error)
            }
        }
        let context = FuzzContext(
            knownClients: clients, accountId: accountId,
            usernames: [
                TestUsers.alice.username, TestUsers.bob.username, TestUsers.carol.username, "nobody@contoso.example",
            ],
            password: TestUsers.alice.password, currentAccount: current,
            accounts: try await call(Fuzz.interface, Broker1Method.getAccounts.rawValue, [.string("mail-app")]),
            deviceInformation: try await call(Fuzz.interface, Broker1Method.getDeviceInformation.rawValue),
            signInOptions: try await call(
                Fuzz.interface, Broker1Method.getSignInOptions.rawValue, [.string("mail-app")]),
            allProperties: try await call(Fuzz.properties, "GetAll", [.string(Fuzz.interface)]),
            introspection: introspection)
        let signals = try await connection.signals(matching: DBusMatchRule(sender: Fuzz.service))
        return FuzzedBroker(
            environment: environment, connection: connection, context: context, configDirectory: configDirectory,
            stateFile: try Self.readStateFile(environment), token: token,
            providerStats: try await Self.providerStats(environment), outboxCount: try await environment.outbox().count,
            signals: signals)
    }

    func close() {
        signalWatch.cancel()
        connection.close()
    }

    /// One call to the broker's object, bounded.
    func call(_ member: String, _ arguments: [DBusValue]) async -> Result<[DBusValue], DBusError> {
        let call = FuzzCall(
            index: 0, kind: "", path: Fuzz.path, interface: Fuzz.interface, member: member, arguments: arguments,
            expectation: .answers(nil))
        return await perform(call, timeout: .seconds(10)).1
    }

    /// Sends `calls` with at most `inFlight` of them waiting for their reply at a time; returns
    /// each with its outcome and the time its reply took.
    func perform(_ calls: [FuzzCall], inFlight: Int, timeout: Duration) async -> [(
        FuzzCall, Result<[DBusValue], DBusError>, Duration
    )] {
        await withTaskGroup(of: (FuzzCall, Result<[DBusValue], DBusError>, Duration).self) { group in
            var results: [(FuzzCall, Result<[DBusValue], DBusError>, Duration)] = []
            var next = 0
            while next < min(inFlight, calls.count) {
                let call = calls[next]
                group.addTask { await self.perform(call, timeout: timeout) }
                next += 1
            }
            while let result = await group.next() {
                results.append(result)
                if next < calls.count {
                    let call = calls[next]
                    group.addTask { await self.perform(call, timeout: timeout) }
                    next += 1
                }
            }
            return results
        }
    }

    private func perform(_ call: FuzzCall, timeout: Duration) async -> (
        FuzzCall, Result<[DBusValue], DBusError>, Duration
    ) {
        let start = ContinuousClock.now
        do {
            let values = try await connection.call(
                destination: Fuzz.service, path: call.path, interface: call.interface,
                member: call.member, arguments: call.arguments, timeout: timeout)
            return (call, .success(values), ContinuousClock.now - start)
        } catch let error as DBusError {
            return (call, .failure(error), ContinuousClock.now - start)
        } catch {
            return (
                call, .failure(DBusError(name: "test.NotADBusError", message: "\(error)")), ContinuousClock.now - start
            )
        }
    }

    /// What differs from the snapshot: brokerd gone or silent, the state file, any app's current or
    /// previous account, the silent token, the properties, a provider request, a code sent, a signal.
    func checkUnchanged() async -> [String] {
        var problems: [String] = []
        guard brokerd.isRunning else {
            return [
                "brokerd is not running; its last output:\n\(brokerd.stderrLines.suffix(30).joined(separator: "\n"))"
            ]
        }
        if case .failure(let error) = await perform(
            FuzzCall(
                index: 0, kind: "", path: Fuzz.path, interface: Fuzz.peer, member: "Ping",
                arguments: [], expectation: .answers(nil)), timeout: .seconds(5)
        ).1 {
            problems.append("Ping failed: \(error)")
        }
        do {
            if try Self.readStateFile(environment) != stateFile { problems.append("state.json changed") }
        } catch {
            problems.append("state.json unreadable: \(error)")
        }
        for client in context.knownClients {
            let current = await call(Broker1Method.getCurrentAccount.rawValue, [.string(client)])
            if (try? current.get()) != context.currentAccount {
                problems.append("GetCurrentAccount(\(client)) is now \(current)")
            }
            let accounts = await call(Broker1Method.getAccounts.rawValue, [.string(client)])
            if (try? accounts.get()) != context.accounts {
                problems.append("GetAccounts(\(client)) is now \(accounts)")
            }
        }
        let silent = await call(
            Broker1Method.acquireTokenSilent.rawValue,
            [.string("mail-app"), .strings(["User.Read"]), .string(""), .vardict([:])])
        if (try? silent.get())?.first?.vardict?["accessToken"]?.string != token {
            problems.append("the silent token changed: \(silent)")
        }
        let properties = await perform(
            FuzzCall(
                index: 0, kind: "", path: Fuzz.path, interface: Fuzz.properties, member: "GetAll",
                arguments: [.string(Fuzz.interface)], expectation: .answers(nil)), timeout: .seconds(5)
        ).1
        if (try? properties.get()) != context.allProperties { problems.append("the properties changed: \(properties)") }
        do {
            if try await Self.providerStats(environment) != providerStats {
                problems.append(
                    "brokerd called the provider: idp-sim's counters changed to "
                        + "\(String(decoding: try await Self.providerStats(environment), as: UTF8.self))"
                )
            }
            if try await environment.outbox().count != outboxCount { problems.append("idp-sim sent a one-time code") }
        } catch {
            problems.append("idp-sim did not answer: \(error)")
        }
        let signals = signalsSeen.names.withLock { $0 }
        if !signals.isEmpty { problems.append("brokerd emitted \(signals)") }
        return problems
    }

    private static func readStateFile(_ environment: BrokerEnvironment) throws -> [UInt8] {
        // Both files: a change would be a line in the journal.
        StateOnDisk.bytes(in: environment.stateDirectory).flatMap { [UInt8]($0 ?? Data()) + [0] }
    }

    private static func providerStats(_ environment: BrokerEnvironment) async throws -> Data {
        try JSONSerialization.data(withJSONObject: try await environment.idpStats(), options: [.sortedKeys])
    }
}
