import BrokerCore
import Foundation
import Locking
import Logging
import TestSupport
import Testing

@testable import BrokerDaemon

/// Who may call, decided from the credentials the bus daemon gives (here a lookup the test
/// scripts), without a bus.
@Suite("Caller policy: the caller's user, the programs a clientId is bound to, one lookup per caller")
struct CallerPolicyTests {
    static let ownUser: UInt32 = 1000
    static let mailProgram = "/opt/contoso/bin/mail"

    /// A lookup that answers `credentials` for every caller and counts the questions, and the
    /// process behind every caller, as `/proc` would show it now (nil: gone).
    final class ScriptedBus: Sendable {
        let lookups = Locked(0)
        let answer: Locked<Result<CallerPolicy.Credentials, BrokerFailure>>
        let process: Locked<CallerPolicy.ProcessIdentity?>

        init(_ credentials: CallerPolicy.Credentials) {
            answer = Locked(.success(credentials))
            process = Locked(credentials.process)
        }

        func policy(bound: [String: Set<String>] = ["mail-app": [CallerPolicyTests.mailProgram]]) -> CallerPolicy {
            CallerPolicy(
                ownUserId: CallerPolicyTests.ownUser, allowedExecutables: bound, logger: Logger(label: "test"),
                probe: { _ in self.process.withLock { $0 } }
            ) { _ in
                self.lookups.withLock { $0 += 1 }
                return try self.answer.withLock { $0 }.get()
            }
        }
    }

    /// The process the scripted callers run in, when the broker looked them up.
    static let started = CallerPolicy.ProcessIdentity(startTime: 4711, executableDevice: 2049, executableInode: 1234)

    static func caller(user: UInt32 = ownUser, program: String? = mailProgram) -> CallerPolicy.Credentials {
        CallerPolicy.Credentials(userId: user, processId: 42, executable: program, process: started)
    }

    /// The failure `body` threw, nil when it returned.
    static func refusal(_ body: () async throws -> Void) async -> BrokerFailure? {
        do {
            try await body()
            return nil
        } catch let failure as BrokerFailure {
            return failure
        } catch {
            Issue.record("not a BrokerFailure: \(error)")
            return nil
        }
    }

    @Test func aCallerOfAnotherUserIsRefusedWhateverItAsksFor() async {
        let bus = ScriptedBus(Self.caller(user: 1001))
        let policy = bus.policy()
        for clientId in ["mail-app", "calendar-app", nil] {
            let refused = await Self.refusal { try await policy.authorize(sender: ":1.7", clientId: clientId) }
            #expect(refused?.code == .accessDenied)
            #expect(refused?.message.contains("user 1000") == true && refused?.message.contains("user 1001") == true)
        }
    }

    @Test func aBoundClientIdServesOnlyItsProgramsAndOthersServeAnyProgram() async {
        let mail = ScriptedBus(Self.caller(program: Self.mailProgram)).policy()
        #expect(await Self.refusal { try await mail.authorize(sender: ":1.1", clientId: "mail-app") } == nil)

        let other = ScriptedBus(Self.caller(program: "/usr/bin/python3")).policy()
        let refused = await Self.refusal { try await other.authorize(sender: ":1.2", clientId: "mail-app") }
        #expect(refused?.code == .accessDenied)
        #expect(refused?.message.contains(Self.mailProgram) == true)
        #expect(refused?.message.contains("/usr/bin/python3") == true)
        #expect(await Self.refusal { try await other.authorize(sender: ":1.2", clientId: "calendar-app") } == nil)
        #expect(await Self.refusal { try await other.authorize(sender: ":1.2", clientId: nil) } == nil)

        // A caller whose program the broker could not read is not the bound program.
        let unknown = ScriptedBus(Self.caller(program: nil)).policy()
        let unknownRefused = await Self.refusal { try await unknown.authorize(sender: ":1.3", clientId: "mail-app") }
        #expect(unknownRefused?.message.contains("an unknown program") == true)
    }

    @Test func aCallersFirstCallsShareOneLookupAndItsLaterOnesNeedNone() async {
        let bus = ScriptedBus(Self.caller())
        let policy = bus.policy()
        #expect(policy.authorizeKnownCaller(sender: ":1.4", clientId: "mail-app") == nil)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    _ = await Self.refusal { try await policy.authorize(sender: ":1.4", clientId: "mail-app") }
                }
            }
        }
        #expect(bus.lookups.withLock { $0 } == 1)
        #expect(policy.authorizeKnownCaller(sender: ":1.4", clientId: "mail-app") != nil)

        // Gone from the bus: a new connection with that name would be someone else.
        policy.forget(":1.4")
        #expect(policy.authorizeKnownCaller(sender: ":1.4", clientId: "mail-app") == nil)
        _ = await Self.refusal { try await policy.authorize(sender: ":1.4", clientId: "mail-app") }
        #expect(bus.lookups.withLock { $0 } == 2)
    }

    @Test func aFailedLookupRefusesThisCallAndIsAskedAgainOnTheNext() async {
        let bus = ScriptedBus(Self.caller())
        bus.answer.withLock { $0 = .failure(BrokerFailure(.accessDenied, "the bus did not say")) }
        let policy = bus.policy()
        let refused = await Self.refusal { try await policy.authorize(sender: ":1.5", clientId: nil) }
        #expect(refused?.code == .accessDenied)

        bus.answer.withLock { $0 = .success(Self.caller()) }
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.5", clientId: nil) } == nil)
        #expect(bus.lookups.withLock { $0 } == 2)
    }

    @Test("a process that runs another program after the lookup is refused its bound clientId, for good")
    func execAfterTheLookup() async {
        let bus = ScriptedBus(Self.caller())
        let policy = bus.policy()
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.6", clientId: "mail-app") } == nil)

        // The attacker's exec: same pid and start time, another executable file.
        bus.process.withLock { $0?.executableInode = 9999 }
        let refused = await Self.refusal { try await policy.authorize(sender: ":1.6", clientId: "mail-app") }
        #expect(refused?.code == .accessDenied)
        #expect(refused?.message.contains("has run another program") == true, "\(refused?.message ?? "")")
        #expect(refused?.message.contains("connect again") == true)
        // The fast path on the bus thread refuses it too.
        guard case .failure? = policy.authorizeKnownCaller(sender: ":1.6", clientId: "mail-app") else {
            Issue.record("the bus thread's check served a changed process")
            return
        }
        // Calls naming no clientId (a sign-in flow's code, started while it was the checked
        // program) are refused on that connection as well; an unbound clientId is anyone's.
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.6", clientId: nil) }?.code == .accessDenied)
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.6", clientId: "calendar-app") } == nil)

        // Exec'ing back to the checked program does not make the connection trusted again.
        bus.process.withLock { $0 = Self.started }
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.6", clientId: "mail-app") } != nil)
    }

    @Test("a process that has exited, or whose pid another process has now, is refused its bound clientId")
    func exitedOrReused() async {
        for (name, now) in [
            ("exited", nil),
            (
                "pid reused",
                CallerPolicy.ProcessIdentity(
                    startTime: 5000, executableDevice: Self.started.executableDevice,
                    executableInode: Self.started.executableInode)
            ),
        ] as [(String, CallerPolicy.ProcessIdentity?)] {
            let bus = ScriptedBus(Self.caller())
            let policy = bus.policy()
            #expect(await Self.refusal { try await policy.authorize(sender: ":1.8", clientId: "mail-app") } == nil)
            bus.process.withLock { $0 = now }
            let refused = await Self.refusal { try await policy.authorize(sender: ":1.8", clientId: "mail-app") }
            #expect(refused?.message.contains("has exited") == true, "\(name): \(refused?.message ?? "")")
            #expect(await Self.refusal { try await policy.authorize(sender: ":1.8", clientId: "calendar-app") } == nil)
        }
        // A connection that never used a bound clientId is not asked about its process.
        let unbound = ScriptedBus(Self.caller(program: "/usr/bin/python3"))
        let policy = unbound.policy()
        unbound.process.withLock { $0 = nil }
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.9", clientId: nil) } == nil)
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.9", clientId: "calendar-app") } == nil)
    }

    @Test("/proc: a process's start time and executable file; deleting the file on disk is no exec")
    func processIdentityFromProc() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("proc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A name with spaces and parentheses, as /proc/PID/stat's second field then holds.
        let program = directory.appendingPathComponent("sleep (odd) name")
        try copyExecutable(URL(fileURLWithPath: "/bin/sleep").resolvingSymlinksInPath().path, to: program.path)
        let child = Process()
        child.executableURL = program
        child.arguments = ["30"]
        try child.run()
        let pid = UInt32(child.processIdentifier)
        // The kernel names the executable once the exec is done: wait for it (bounded).
        let deadline = ContinuousClock.now + .seconds(5)
        while CallerPolicy.executable(of: pid) != program.path, ContinuousClock.now < deadline {
            usleep(5000)
        }
        let (path, identity) = try #require(CallerPolicy.program(of: pid))
        #expect(path == program.path)
        #expect(identity.startTime > 0)
        #expect(CallerPolicy.identity(of: pid) == identity)

        try FileManager.default.removeItem(at: program)
        #expect(CallerPolicy.executable(of: pid) == program.path + " (deleted)")
        #expect(CallerPolicy.identity(of: pid) == identity, "the running program is the same file")

        kill(Int32(pid), SIGKILL)
        child.waitUntilExit()
        #expect(CallerPolicy.identity(of: pid) == nil)
    }

    /// Every Python app runs /usr/bin/python3, and every sandboxed app reaches the bus through
    /// xdg-dbus-proxy: one share for all of them would let one starve the others.
    @Test("an interpreter's apps are told apart by their scripts, a bus proxy's by its process")
    func appsBehindOneExecutable() throws {
        let shell = CallerPolicy.resolved("/bin/sh")
        let children = try ["sleep 30 # notes", "sleep 30 # mail"].map { code in
            try ChildProcess("sh", executable: "/bin/sh", arguments: ["-c", code])
        }
        defer { for child in children { child.kill() } }
        let apps = children.map { CallerPolicy.app(executable: shell, processId: UInt32($0.pid)) }
        #expect(apps[0] != apps[1], "\(apps)")
        #expect(apps[0] == shell + " -c sleep 30 # notes", "\(apps)")
        #expect(CallerPolicy.app(executable: "/usr/bin/mail-app", processId: 1) == "/usr/bin/mail-app")
        #expect(
            CallerPolicy.app(executable: "/usr/bin/xdg-dbus-proxy", processId: 4242)
                == "/usr/bin/xdg-dbus-proxy, process 4242")
    }
}
