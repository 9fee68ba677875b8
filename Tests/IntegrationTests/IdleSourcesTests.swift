import BrokerAPI
import DBus
import Foundation
import Locking
import TestSupport
import Testing

/// Sign-out after inactivity on desktops without GNOME's idle monitor: the idle time of
/// `org.freedesktop.ScreenSaver` (KDE on X11), then logind's `IdleHint`. Real brokerd and
/// brokerctl; both services are stand-ins the test owns on private buses, since neither can be
/// driven for real here: KDE's screen locker needs a running Plasma session (and answers the idle
/// time only on X11), and logind's hint is set by a desktop through a real login session on the
/// machine's system bus. Seconds stand for minutes: inactive for 2 s, then a 10 s warning.
@Suite("Idle sources beyond GNOME's", .serialized, .timeLimit(.minutes(2)))
struct IdleSourcesTests {
    static let config = #"{"idleSignOutSeconds": 12, "idleWarningSeconds": 10}"#

    /// brokerd with the idle sign-out on, no GNOME idle monitor, and the system bus `systemBus`
    /// (none unless given), plus what `environment` adds.
    static func environment(
        systemBus: String? = nil, extra: [String: String] = [:], config settings: String = Self.config
    ) throws -> BrokerEnvironment {
        let directory = try TemporaryDirectory()
        let config = try directory.write("idle.conf", settings)
        chmod(config, 0o600)
        return try BrokerEnvironment(
            brokerArguments: ["--config", config],
            brokerEnvironment: ["DBUS_SYSTEM_BUS_ADDRESS": systemBus ?? "unix:path=/nonexistent"].merging(extra) {
                $1
            })
    }

    /// brokerd again, with the idle sign-out on: after the test's stand-ins are on the bus.
    static func restart(_ env: BrokerEnvironment, config settings: String = Self.config) async throws {
        try await offThePool {
            let config = try env.directory.write("idle.conf", settings)
            chmod(config, 0o600)
            try env.restartBroker(extraArguments: ["--config", config])
        }
    }

    /// The broker's signals, as an app hears them.
    static func listen(_ env: BrokerEnvironment) async throws -> (DBusConnection, AsyncStream<DBusSignal>) {
        let app = try await offThePool { try DBusConnection(address: env.bus.address) }
        let signals = try await app.signals(
            matching: DBusMatchRule(path: BrokerNames.objectPath, interface: BrokerNames.interface))
        return (app, signals)
    }

    /// The next of `members` on `stream`, within `timeout`.
    static func next(
        _ members: Set<String>, on stream: AsyncStream<DBusSignal>, timeout: Duration = .seconds(15)
    ) async throws -> DBusSignal {
        guard let found = await within(timeout, { await stream.first { members.contains($0.member) } }) else {
            throw ProcessFailure("none of \(members) within \(timeout)")
        }
        return found
    }

    private static func realtimeMicroseconds() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1_000_000) }

    @Test("org.freedesktop.ScreenSaver: the idle time growing warns, activity cancels")
    func screenSaver() async throws {
        let env = try await offThePool { try Self.environment() }
        // The screensaver is on the bus before brokerd starts, as on a desktop.
        let saver = try await StandInScreenSaver(bus: env.bus)
        defer { withExtendedLifetime(saver) {} }
        try await Self.restart(env)
        let info = try await offThePool { try env.brokerctl(["device-info"]) }
        #expect(
            info.stdout.contains("org.freedesktop.ScreenSaver (GetSessionIdleTime at /org/freedesktop/ScreenSaver)"),
            "\(info.stdout)")
        // Asked once at start (is it there, does it answer), then nothing while nobody is signed in.
        let askedAtStart = saver.asked
        let (app, signals) = try await Self.listen(env)
        defer { app.close() }
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        #expect(askedAtStart >= 1 && saver.askedBeforeTouch == askedAtStart, "\(askedAtStart), \(saver.asked)")

        // Nobody touches the device: the idle time grows past the quiet 2 s, the warning starts.
        let pending = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
        #expect(pending.arguments.first?.string == "idle")
        // The person is active again: the next answer (within a second) is small, the warning ends.
        saver.touch()
        let cancelled = try await Self.next([Broker1Signal.signOutCancelled.rawValue, "AccountChanged"], on: signals)
        #expect(cancelled.member == Broker1Signal.signOutCancelled.rawValue)
        let signedIn = try await offThePool {
            let reply = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
            return try reply.json()["current"] is [String: Any]
        }
        #expect(signedIn, "still signed in")
    }

    /// A sign-out during the warning changes the account and ends the deadline in one change:
    /// apps hear one `PropertiesChanged` listing both, after `AccountChanged`, not one for each.
    /// The next sign-in's `PropertiesChanged` marks the end: brokerd sends in order, so what came
    /// of the sign-out came before it.
    @Test("a sign-out during the warning: one PropertiesChanged lists the account and the deadline")
    func signOutDuringTheWarningIsOnePropertiesChanged() async throws {
        // A warning of a minute: the sign-out must come during it however slowly a loaded
        // machine starts brokerctl.
        let long = #"{"idleSignOutSeconds": 62, "idleWarningSeconds": 60}"#
        let env = try await offThePool { try Self.environment(config: long) }
        let saver = try await StandInScreenSaver(bus: env.bus)
        defer { withExtendedLifetime(saver) {} }
        try await Self.restart(env, config: long)
        let app = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { app.close() }
        // Every signal of the broker's object, PropertiesChanged included, in the order sent.
        let signals = try await app.signals(
            matching: DBusMatchRule(sender: BrokerNames.busName, path: BrokerNames.objectPath))
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let pending = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
        let deadline = pending.arguments.dropFirst().first?.uint64 ?? 0
        let announced = try await Self.next(["PropertiesChanged"], on: signals)
        #expect(announced.arguments.dropFirst().first?.vardict == ["SignOutDeadline": .uint64(deadline)])

        let signedOut = try await offThePool { try env.brokerctl(["sign-out", "--client-id", "mail-app"]) }
        #expect(signedOut.status == 0, "\(signedOut.stderr)")
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)

        let collected = await within(.seconds(15)) {
            var heard: [DBusSignal] = []
            for await signal in signals {
                heard.append(signal)
                let changed = signal.arguments.dropFirst().first?.vardict
                if signal.member == "PropertiesChanged", changed?["CurrentAccount"]?.vardict?.isEmpty == false {
                    return heard
                }
            }
            return nil
        }
        let heard = try #require(collected, "no PropertiesChanged of the next sign-in within 15 s")
        #expect(
            heard.map(\.member) == ["AccountChanged", "PropertiesChanged", "AccountChanged", "PropertiesChanged"],
            "\(heard.map { "\($0.member) \($0.arguments)" })")
        #expect(heard.first?.arguments.last?.string == "signed-out")
        let signOutChange = heard.dropFirst().first?.arguments
        #expect(signOutChange?.first?.string == BrokerNames.interface)
        #expect(
            signOutChange?.dropFirst().first?.vardict == [
                "CurrentAccount": .vardict([:]), "SignOutDeadline": .uint64(0),
            ])
    }

    @Test("logind's IdleHint: the quiet time counts from IdleSinceHint, the hint's end cancels")
    func logindIdleHint() async throws {
        let system = try await offThePool { try PrivateBus() }
        let logind = try await FakeLogind(bus: system, session: "c9")
        let session = StandInLogindSession(connection: logind.connection, path: logind.sessionPath)
        defer { withExtendedLifetime((logind, session)) {} }
        let env = try await offThePool {
            try Self.environment(systemBus: system.address, extra: ["XDG_SESSION_ID": "c9"])
        }
        let info = try await offThePool { try env.brokerctl(["device-info"]) }
        #expect(info.stdout.contains("logind IdleHint (/org/freedesktop/login1/session/c9)"), "\(info.stdout)")
        let (app, signals) = try await Self.listen(env)
        defer { app.close() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)

        // The desktop's own idle delay passed a second ago: the warning starts 2 s after that.
        let since = Self.realtimeMicroseconds() - 1_000_000
        try session.setIdle(true, since: since)
        let pending = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
        let deadline = pending.arguments.dropFirst().first?.uint64 ?? 0
        // Due at since + 2 s + 10 s (the core keeps whole seconds), never counted from the signal.
        #expect(deadline >= since + 11_000_000 && deadline <= since + 14_000_000, "\(deadline) since \(since)")

        try session.setIdle(false, since: 0)
        let cancelled = try await Self.next([Broker1Signal.signOutCancelled.rawValue, "AccountChanged"], on: signals)
        #expect(cancelled.member == Broker1Signal.signOutCancelled.rawValue)
    }

    @Test("no idle source at all: said at start and in the device information")
    func noSource() async throws {
        let env = try await offThePool { try Self.environment() }
        let info = try await offThePool { try env.brokerctl(["device-info"]) }
        #expect(info.stdout.contains("none found at start"), "\(info.stdout)")
        try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("the desktop offers no idle source")
            }
        }
    }
}

/// `org.freedesktop.ScreenSaver` as KDE's screen locker serves it, for the idle time only:
/// `GetSessionIdleTime` answers the milliseconds since the test last called ``touch()``.
final class StandInScreenSaver: DBusObject, @unchecked Sendable {
    let connection: DBusConnection
    private let state = Locked<(lastActivity: ContinuousClock.Instant, asked: Int, askedBeforeTouch: Int?)>(
        (.now, 0, nil))

    init(bus: PrivateBus) async throws {
        connection = try await offThePool { try DBusConnection(address: bus.address) }
        connection.export(self, at: "/org/freedesktop/ScreenSaver")
        guard try await connection.requestName("org.freedesktop.ScreenSaver") == .primaryOwner else {
            throw ProcessFailure("org.freedesktop.ScreenSaver is taken on the test bus")
        }
    }

    deinit { connection.close() }

    /// How often brokerd asked.
    var asked: Int { state.withLock { $0.asked } }
    /// How often it had asked when the test first touched.
    var askedBeforeTouch: Int? { state.withLock { $0.askedBeforeTouch } }

    /// The person's input: the idle time starts again from 0.
    func touch() {
        state.withLock {
            $0.lastActivity = .now
            if $0.askedBeforeTouch == nil { $0.askedBeforeTouch = $0.asked }
        }
    }

    var interfaces: [DBusInterfaceDescription] {
        [
            DBusInterfaceDescription(
                name: "org.freedesktop.ScreenSaver",
                methods: [.init(name: "GetSessionIdleTime", inArguments: [], outArguments: [.init("seconds", "u")])])
        ]
    }

    /// Answered on the connection's thread, as the session's screen locker would: a test
    /// process busy with other suites must not delay the answer past brokerd's timeout.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? { .values(idleTime()) }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] { idleTime() }

    private func idleTime() -> [DBusValue] {
        let idle = state.withLock { state in
            state.asked += 1
            return ContinuousClock.now - state.lastActivity
        }
        let milliseconds = idle.components.seconds * 1000 + idle.components.attoseconds / 1_000_000_000_000_000
        return [.uint32(UInt32(clamping: milliseconds))]
    }

    func propertyValues(interface: String) -> [String: DBusValue] { [:] }
}

/// logind's session object, for its idle hint: `IdleHint` and `IdleSinceHint`, changed by the
/// test and announced with `PropertiesChanged`, as logind does when the desktop sets the hint.
final class StandInLogindSession: DBusObject, @unchecked Sendable {
    private let connection: DBusConnection
    private let path: String
    private let hint = Locked<(idle: Bool, since: UInt64)>((false, 0))

    init(connection: DBusConnection, path: String) {
        self.connection = connection
        self.path = path
        connection.export(self, at: path)
    }

    func setIdle(_ idle: Bool, since: UInt64) throws {
        hint.withLock { $0 = (idle, since) }
        try connection.emitPropertiesChanged(
            path: path, interface: "org.freedesktop.login1.Session",
            changed: ["IdleHint": .bool(idle), "IdleSinceHint": .uint64(since)], invalidated: [])
    }

    var interfaces: [DBusInterfaceDescription] {
        [
            DBusInterfaceDescription(
                name: "org.freedesktop.login1.Session", methods: [],
                properties: [.init(name: "IdleHint", signature: "b"), .init(name: "IdleSinceHint", signature: "t")])
        ]
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] { [] }

    func propertyValues(interface: String) -> [String: DBusValue] {
        let (idle, since) = hint.withLock { $0 }
        return ["IdleHint": .bool(idle), "IdleSinceHint": .uint64(since)]
    }
}
