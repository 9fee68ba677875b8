import DBus
import Foundation
import TestSupport
import Testing

/// `signOutOnLock`: the session's screen lock ends the shift, heard from the desktop's
/// screensaver (`ActiveChanged(true)`) or from logind (its session's `Lock` signal on the system
/// bus). Real brokerd and brokerctl; the screensaver and logind are stand-ins the test owns on
/// private buses: neither can be locked for real in a test (GNOME's lock screen needs a running
/// gnome-shell, logind a real login session on the machine's system bus).
@Suite("Sign-out on screen lock", .serialized)
struct ScreenLockTests {
    private static func environment(extra: [String: String] = [:]) throws -> BrokerEnvironment {
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.conf", #"{"signOutOnLock": true}"#)
        chmod(config, 0o600)
        return try BrokerEnvironment(
            brokerArguments: ["--config", config],
            brokerEnvironment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent"].merging(extra) { $1 })
    }

    /// Three apps each hear the sign-out once, with the cause `lock`.
    private static func expectLockSignOut(_ env: BrokerEnvironment, _ watchers: [ChildProcess]) throws {
        for watcher in watchers {
            let line = try watcher.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("signed-out") }
            #expect(line.hasPrefix("signed-out (lock)"), "\(line)")
        }
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"] is NSNull)
    }

    /// GNOME Shell's, KDE's (org.freedesktop), Xfce's (xfce4-screensaver) and MATE's screensaver,
    /// each as it names itself. A stand-in on the private bus: GNOME Shell's lock screen needs a
    /// whole GNOME session, and the others a desktop each, none of which runs headless here.
    @Test(
        "the screensaver becoming active signs the device out",
        arguments: [
            "org.gnome.ScreenSaver", "org.freedesktop.ScreenSaver", "org.xfce.ScreenSaver", "org.mate.ScreenSaver",
        ])
    func screenSaver(_ name: String) async throws {
        // The screensaver is on the bus before brokerd starts, as on a desktop.
        let lockEnv = try await offThePool { try Self.environment() }
        let saver = try await offThePool { try DBusConnection(address: lockEnv.bus.address) }
        defer { saver.close() }
        _ = try await saver.requestName(name)
        try await offThePool { try lockEnv.restartBroker(extraArguments: try Self.configArguments(lockEnv)) }
        #expect(try await offThePool { try lockEnv.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let watchers = try await offThePool { try (0..<3).map { _ in try lockEnv.watch() } }
        let info = try await offThePool { try lockEnv.brokerctl(["device-info"]) }
        #expect(info.stdout.contains(name), "\(info.stdout)")

        try saver.emitSignal(
            path: "/" + name.replacingOccurrences(of: ".", with: "/"), interface: name, member: "ActiveChanged",
            arguments: [.bool(true)], destination: nil)
        try await offThePool { try Self.expectLockSignOut(lockEnv, watchers) }
    }

    /// From the attacker's side: an app owning no name (one SignOut would refuse, say) claims to
    /// be each screensaver, broadcast and addressed to brokerd. Only the screensaver that owns its
    /// name now is believed; brokerd logs each forged signal it drops (at debug level), which is
    /// how the test knows brokerd has read them all.
    @Test("an app claiming to be the screensaver does not sign the device out")
    func forgedScreenSaver() async throws {
        let env = try await offThePool { try Self.environment() }
        let saver = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { saver.close() }
        _ = try await saver.requestName("org.gnome.ScreenSaver")
        try await offThePool { try env.restartBroker(extraArguments: try Self.configArguments(env)) }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let watcher = try await offThePool { try env.watch() }
        let forger = try await ForgingApp(bus: env.bus)
        let names = [
            "org.gnome.ScreenSaver", "org.freedesktop.ScreenSaver", "org.xfce.ScreenSaver", "org.mate.ScreenSaver",
        ]
        for name in names {
            try await forger.forge(
                path: "/" + name.replacingOccurrences(of: ".", with: "/"), interface: name, member: "ActiveChanged",
                arguments: [.bool(true)])
        }
        // Nor from an app that takes a screensaver's name the desktop does not use (on GNOME,
        // MATE's is free): brokerd listens only to those running when it started.
        _ = try await forger.connection.requestName("org.mate.ScreenSaver")
        try await forger.forge(
            path: "/org/mate/ScreenSaver", interface: "org.mate.ScreenSaver", member: "ActiveChanged",
            arguments: [.bool(true)])
        // Once brokerd has dropped a last forged GNOME one, it has read everything before it.
        try await forger.forge(
            path: "/org/gnome/ScreenSaver", interface: "org.gnome.ScreenSaver", member: "ActiveChanged",
            arguments: [.bool(true)])
        try await offThePool {
            _ = try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true, skipping: 1) {
                $0.contains("ignored a signal claiming") && $0.contains("org.gnome.ScreenSaver.ActiveChanged")
            }
        }
        let info = try await offThePool { try env.brokerctl(["device-info"]) }
        #expect(info.stdout.contains("org.gnome.ScreenSaver") && !info.stdout.contains("org.mate"), "\(info.stdout)")
        #expect(!env.brokerd.process.stderrLines.contains { $0.contains("the screen was locked") })
        let current = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        }
        #expect(try current.json()["current"] is [String: Any], "still signed in")

        // The real screensaver is still believed.
        try saver.emitSignal(
            path: "/org/gnome/ScreenSaver", interface: "org.gnome.ScreenSaver", member: "ActiveChanged",
            arguments: [.bool(true)], destination: nil)
        try await offThePool { try Self.expectLockSignOut(env, [watcher]) }
    }

    @Test("logind locking the session signs the device out")
    func logindLock() async throws {
        let system = try await offThePool { try PrivateBus() }
        let logind = try await FakeLogind(bus: system, session: "c7")
        defer { withExtendedLifetime(logind) {} }
        let env = try await offThePool {
            try Self.environment(extra: ["DBUS_SYSTEM_BUS_ADDRESS": system.address, "XDG_SESSION_ID": "c7"])
        }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let info = try await offThePool { try env.brokerctl(["device-info"]) }
        #expect(info.stdout.contains("logind /org/freedesktop/login1/session/c7"), "\(info.stdout)")
        let watchers = try await offThePool { try (0..<3).map { _ in try env.watch() } }
        try logind.lock()
        try await offThePool { try Self.expectLockSignOut(env, watchers) }
    }

    @Test("with nothing that could say so, brokerd says it at start and in the device information")
    func noSource() async throws {
        let env = try await offThePool { try Self.environment() }
        let info = try await offThePool { try env.brokerctl(["device-info"]) }
        #expect(info.stdout.contains("none found at start"), "\(info.stdout)")
        try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("signOutOnLock is set, but no screensaver")
            }
        }
    }

    private static func configArguments(_ env: BrokerEnvironment) throws -> [String] {
        let config = try env.directory.write("lock.conf", #"{"signOutOnLock": true}"#)
        chmod(config, 0o600)
        return ["--config", config]
    }
}

/// logind's manager and one session, for tests: `GetSession(id)` gives the session's object, on
/// which the test emits `Lock` as `loginctl lock-session` makes logind do.
final class FakeLogind: DBusObject, @unchecked Sendable {
    let connection: DBusConnection
    let sessionPath: String

    init(bus: PrivateBus, session: String) async throws {
        sessionPath = "/org/freedesktop/login1/session/" + session
        connection = try await offThePool { try DBusConnection(address: bus.address) }
        connection.export(self, at: "/org/freedesktop/login1")
        guard try await connection.requestName("org.freedesktop.login1") == .primaryOwner else {
            throw ProcessFailure("org.freedesktop.login1 is taken on the test bus")
        }
    }

    deinit { connection.close() }

    var interfaces: [DBusInterfaceDescription] {
        [
            DBusInterfaceDescription(
                name: "org.freedesktop.login1.Manager",
                methods: [
                    .init(name: "GetSession", inArguments: [.init("session_id", "s")], outArguments: [.init("o", "o")]),
                    .init(name: "GetSessionByPID", inArguments: [.init("pid", "u")], outArguments: [.init("o", "o")]),
                ])
        ]
    }

    /// Answered on the connection's thread: brokerd waits 5 s for logind, and a test process
    /// busy with other suites must not make it wait longer.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? { .values([.objectPath(sessionPath)]) }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] { [.objectPath(sessionPath)] }

    func propertyValues(interface: String) -> [String: DBusValue] { [:] }

    func lock() throws {
        try connection.emitSignal(
            path: sessionPath, interface: "org.freedesktop.login1.Session", member: "Lock", arguments: [],
            destination: nil)
    }
}
