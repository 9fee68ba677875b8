import BrokerAPI
import DBus
import Foundation
import Locking
import TestSupport
import Testing

/// The person is told, not only the apps: a desktop notification when the warning of a sign-out
/// after inactivity starts, with an action "Stay signed in", withdrawn when the warning ends. Real
/// brokerd; the idle time comes from the stand-in screensaver of ``IdleSourcesTests`` (quiet 2 s,
/// warning 10 s). The notice is shown by a real server from Debian (notification-daemon, under
/// Xvfb) where the test only needs it shown and withdrawn, and by a stand-in where the test must
/// invoke its action (see there why).
@Suite("The person is told of a sign-out", .serialized, .timeLimit(.minutes(2)))
struct SignOutNoticeTests {
    @Test("without a notification server, brokerd says so once and goes on")
    func noServer() async throws {
        let env = try await offThePool { try IdleSourcesTests.environment() }
        let saver = try await StandInScreenSaver(bus: env.bus)
        defer { withExtendedLifetime(saver) {} }
        try await IdleSourcesTests.restart(env)
        let (app, signals) = try await IdleSourcesTests.listen(env)
        defer { app.close() }
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        // Two warnings: the person comes back during the first, then leaves again.
        _ = try await IdleSourcesTests.next([Broker1Signal.signOutPending.rawValue], on: signals)
        saver.touch()
        _ = try await IdleSourcesTests.next([Broker1Signal.signOutCancelled.rawValue], on: signals)
        _ = try await IdleSourcesTests.next([Broker1Signal.signOutPending.rawValue], on: signals)
        // Said at the first warning; the second only at debug level (the tests' brokerd logs it).
        let text = "no notification server answered"
        let said = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true, skipping: 1) { $0.contains(text) }
            return env.brokerd.process.stderrLines.filter { $0.contains(text) }
        }
        #expect(said.count == 2 && said[0].contains("notice") && said[1].contains("debug"), "\(said)")
    }

    @Test("the person is told by a real notification server, and the notice is withdrawn on activity")
    func realNotificationServer() async throws {
        let env = try await offThePool { try IdleSourcesTests.environment() }
        let server = try await HeadlessNotificationServer(bus: env.bus)
        defer { withExtendedLifetime(server) {} }
        let saver = try await StandInScreenSaver(bus: env.bus)
        defer { withExtendedLifetime(saver) {} }
        try await IdleSourcesTests.restart(env)
        let watcher = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { watcher.close() }
        let closed = try await watcher.signals(
            matching: DBusMatchRule(
                sender: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
                interface: "org.freedesktop.Notifications", member: "NotificationClosed"))
        let (app, signals) = try await IdleSourcesTests.listen(env)
        defer { app.close() }
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)

        _ = try await IdleSourcesTests.next([Broker1Signal.signOutPending.rawValue], on: signals)
        // The real server answered Notify with the notice's id, which brokerd logs.
        let told = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("told the person of the sign-out")
            }
        }
        let id = told.split(separator: "notification=").last.flatMap { UInt32($0.prefix { $0.isNumber }) }
        #expect(id != nil, "\(told)")
        saver.touch()
        _ = try await IdleSourcesTests.next([Broker1Signal.signOutCancelled.rawValue], on: signals)
        // Withdrawn: the server says it closed the notice because it was asked to (reason 3).
        let gone = await within(.seconds(10)) { await closed.first { $0.arguments.first?.uint32 == id } }
        #expect(gone?.arguments.dropFirst().first?.uint32 == 3, "\(String(describing: gone))")
    }

    /// From the attacker's side: an app owning no name sends "Stay signed in" for the notices the
    /// real server will give out next, before any warning, then for every id once the notice is
    /// up. Neither counts: an action is believed only from the server, and only for the notice
    /// brokerd posted, read after it asked for it. The person stays idle, so the device is signed
    /// out at the deadline.
    @Test("an app forging Stay signed in, before or during the warning, does not keep the person signed in")
    func forgedStayAction() async throws {
        let env = try await offThePool { try IdleSourcesTests.environment() }
        let server = try await HeadlessNotificationServer(bus: env.bus)
        defer { withExtendedLifetime(server) {} }
        let saver = try await StandInScreenSaver(bus: env.bus)
        defer { withExtendedLifetime(saver) {} }
        try await IdleSourcesTests.restart(env)
        let (app, signals) = try await IdleSourcesTests.listen(env)
        defer { app.close() }
        let forger = try await ForgingApp(bus: env.bus)
        func forgeStay(_ ids: ClosedRange<UInt32>) async throws {
            for id in ids {
                try await forger.forge(
                    path: "/org/freedesktop/Notifications", interface: "org.freedesktop.Notifications",
                    member: "ActionInvoked", arguments: [.uint32(id), .string("stay-signed-in")])
            }
        }
        try await forgeStay(1...8)
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        _ = try await IdleSourcesTests.next([Broker1Signal.signOutPending.rawValue], on: signals)
        _ = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("told the person of the sign-out")
            }
        }
        try await forgeStay(1...8)
        let next = try await IdleSourcesTests.next(
            [Broker1Signal.signOutCancelled.rawValue, "AccountChanged"], on: signals, timeout: .seconds(20))
        #expect(next.member == "AccountChanged" && next.arguments.last?.string == "signed-out", "\(next.member)")
        #expect(!env.brokerd.process.stderrLines.contains { $0.contains("the person chose to stay signed in") })
    }

    /// The action "Stay signed in" counts as activity. A stand-in server: clicking the action's
    /// button of a real one needs a pointer at a place the server's layout decides (and
    /// notification-daemon draws its buttons without telling where), so the test emits the
    /// `ActionInvoked` a click makes the server emit.
    @Test("the notice's action Stay signed in cancels the warning; a sign-out withdraws the notice")
    func stayAction() async throws {
        let env = try await offThePool { try IdleSourcesTests.environment() }
        let notifications = try await StandInNotifications(bus: env.bus)
        defer { withExtendedLifetime(notifications) {} }
        let saver = try await StandInScreenSaver(bus: env.bus)
        defer { withExtendedLifetime(saver) {} }
        try await IdleSourcesTests.restart(env)
        let (app, signals) = try await IdleSourcesTests.listen(env)
        defer { app.close() }
        saver.touch()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)

        _ = try await IdleSourcesTests.next([Broker1Signal.signOutPending.rawValue], on: signals)
        let events = notifications.events
        func asked() async -> StandInNotifications.Event? {
            await within(.seconds(10)) { await events.first { _ in true } }
        }
        guard case .shown(let id, let summary, let body, let actions)? = await asked() else {
            Issue.record("no notice shown")
            return
        }
        #expect(summary == "Signing out soon")
        #expect(body.contains("signed out in 10 seconds because of inactivity"), "\(body)")
        #expect(actions == ["stay-signed-in", "Stay signed in"])
        // The person chooses to stay; the device stays idle, so the warning comes again after it.
        try notifications.invoke(id, action: "stay-signed-in")
        let cancelled = try await IdleSourcesTests.next(
            [Broker1Signal.signOutCancelled.rawValue, "AccountChanged"], on: signals)
        #expect(cancelled.member == Broker1Signal.signOutCancelled.rawValue)
        guard case .closed(let withdrawn)? = await asked() else {
            Issue.record("not withdrawn")
            return
        }
        #expect(withdrawn == id)

        // The warning again, and this time the sign-out: the notice goes with it.
        _ = try await IdleSourcesTests.next([Broker1Signal.signOutPending.rawValue], on: signals)
        guard case .shown(let again, _, _, _)? = await asked() else {
            Issue.record("not shown again")
            return
        }
        let signedOut = try await IdleSourcesTests.next(["AccountChanged"], on: signals, timeout: .seconds(20))
        #expect(signedOut.arguments.last?.string == "signed-out")
        guard case .closed(let gone)? = await asked() else {
            Issue.record("not withdrawn at sign-out")
            return
        }
        #expect(gone == again)
    }
}

/// A notification server that tells the test what it was asked, and emits `ActionInvoked` for it.
final class StandInNotifications: DBusObject, @unchecked Sendable {
    enum Event: Sendable {
        case shown(id: UInt32, summary: String, body: String, actions: [String])
        case closed(UInt32)
    }

    let connection: DBusConnection
    /// What brokerd asked, in order.
    let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let lastId = Locked<UInt32>(0)

    init(bus: PrivateBus) async throws {
        (events, continuation) = AsyncStream.makeStream(of: Event.self)
        connection = try await offThePool { try DBusConnection(address: bus.address) }
        connection.export(self, at: "/org/freedesktop/Notifications")
        guard try await connection.requestName("org.freedesktop.Notifications") == .primaryOwner else {
            throw ProcessFailure("org.freedesktop.Notifications is taken on the test bus")
        }
    }

    deinit {
        continuation.finish()
        connection.close()
    }

    func invoke(_ id: UInt32, action: String) throws {
        try connection.emitSignal(
            path: "/org/freedesktop/Notifications", interface: "org.freedesktop.Notifications",
            member: "ActionInvoked", arguments: [.uint32(id), .string(action)], destination: nil)
    }

    var interfaces: [DBusInterfaceDescription] {
        [
            DBusInterfaceDescription(
                name: "org.freedesktop.Notifications",
                methods: [
                    .init(
                        name: "Notify",
                        inArguments: [
                            .init("app_name", "s"), .init("replaces_id", "u"), .init("app_icon", "s"),
                            .init("summary", "s"), .init("body", "s"), .init("actions", "as"),
                            .init("hints", "a{sv}"), .init("expire_timeout", "i"),
                        ], outArguments: [.init("id", "u")]),
                    .init(name: "CloseNotification", inArguments: [.init("id", "u")], outArguments: []),
                ])
        ]
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        let arguments = call.arguments
        if call.member == "CloseNotification" {
            if let id = arguments.first?.uint32 { continuation.yield(.closed(id)) }
            return []
        }
        let id = lastId.withLock {
            $0 += 1
            return $0
        }
        continuation.yield(
            .shown(
                id: id, summary: arguments[3].string ?? "", body: arguments[4].string ?? "",
                actions: arguments[5].arrayElements?.compactMap(\.string) ?? []))
        return [.uint32(id)]
    }

    func propertyValues(interface: String) -> [String: DBusValue] { [:] }
}

/// A real notification server from Debian (`notification-daemon`, GTK) on the test's bus, drawing
/// on a headless X server (Xvfb) of its own.
final class HeadlessNotificationServer: @unchecked Sendable {
    static let executable = "/usr/lib/notification-daemon/notification-daemon"
    private let display: ChildProcess
    private let server: ChildProcess

    /// Cancels the test when a program is missing; outside the initializer for the reason
    /// `HeadlessMutter.requireMutter` gives.
    static func requirePrograms() throws {
        for program in [executable, "/usr/bin/Xvfb"] where !FileManager.default.isExecutableFile(atPath: program) {
            try Test.cancel("\(program) is not installed (make deps installs notification-daemon and xvfb)")
        }
    }

    init(bus: PrivateBus) async throws {
        try Self.requirePrograms()
        // Xvfb picks a free display and writes its number on the descriptor -displayfd names.
        display = try ChildProcess(
            "Xvfb", executable: "/usr/bin/Xvfb",
            arguments: ["-displayfd", "1", "-screen", "0", "1024x768x24", "-nolisten", "tcp"])
        let number = try display.waitForLine(timeout: .seconds(20)) { Int($0) != nil }
        let watcher = try await offThePool { try DBusConnection(address: bus.address) }
        defer { watcher.close() }
        let owners = try await watcher.signals(
            matching: DBusMatchRule(
                sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameOwnerChanged", arg0: "org.freedesktop.Notifications"))
        // No accessibility bus: nothing is activated that would outlive the test.
        server = try ChildProcess(
            "notification-daemon", executable: Self.executable, arguments: [],
            environment: [
                "DBUS_SESSION_BUS_ADDRESS": bus.address, "DISPLAY": ":" + number, "NO_AT_BRIDGE": "1",
                "GTK_A11Y": "none", "WAYLAND_DISPLAY": "",
            ])
        guard await within(.seconds(20), { await owners.first { _ in true } }) != nil else {
            throw ProcessFailure("notification-daemon did not serve its name within 20 s:\n\(server.allOutput)")
        }
    }

    deinit {
        server.kill()
        display.kill()
    }
}
