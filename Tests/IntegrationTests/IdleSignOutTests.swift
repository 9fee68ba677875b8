import BrokerAPI
import DBus
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// Sign-out after inactivity, with the real GNOME idle monitor: a headless `mutter` (Debian's) on
/// the test's private bus, its idle time reset by real input through its remote-desktop API, and
/// the real brokerd. Seconds stand for minutes: inactive for 5 s, then a 10 s warning, long enough
/// that a test process starved by parallel suites on two cores still acts within each.
@Suite("Sign-out after inactivity", .serialized, .timeLimit(.minutes(2)))
struct IdleSignOutTests {
    /// A headless mutter serving the idle monitor and remote desktop on `bus`.
    final class HeadlessMutter: @unchecked Sendable {
        let process: ChildProcess
        let connection: DBusConnection
        private var session: String?

        /// Cancels the test when mutter is missing. Outside the initializer: a never-returning call
        /// in a class's initializer leaves the compiler's clean-up of a partly made object
        /// unreachable, a warning in every file of the module.
        static func requireMutter() throws {
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/mutter") else {
                try Test.cancel("/usr/bin/mutter is not installed (the Debian package mutter; make deps installs it)")
            }
        }

        init(bus: PrivateBus, in directory: TemporaryDirectory) async throws {
            try Self.requireMutter()
            let home = directory.path + "/mutter-home"
            for sub in ["", "/run"] {
                try FileManager.default.createDirectory(
                    atPath: home + sub, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            }
            connection = try await offThePool { try DBusConnection(address: bus.address) }
            process = try ChildProcess(
                "mutter", executable: "/usr/bin/mutter",
                arguments: ["--headless", "--wayland", "--no-x11", "--virtual-monitor", "1280x800"],
                environment: [
                    "DBUS_SESSION_BUS_ADDRESS": bus.address, "XDG_RUNTIME_DIR": home + "/run", "HOME": home,
                    "GSETTINGS_BACKEND": "memory", "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent",
                    "DISPLAY": "", "WAYLAND_DISPLAY": "",
                ])
            // Ready once it owns both names it serves (its start takes a fraction of a second).
            let deadline = ContinuousClock.now + .seconds(20)
            for name in [IdleWatchNames.monitor, "org.gnome.Mutter.RemoteDesktop"] {
                while try await !hasOwner(name) {
                    guard ContinuousClock.now < deadline else {
                        throw ProcessFailure("mutter did not serve \(name) within 20 s:\n\(process.allOutput)")
                    }
                    try await Task.sleep(for: .milliseconds(50))  // polling the bus for mutter's readiness
                }
            }
        }

        deinit {
            process.signal(SIGTERM)
            _ = try? process.waitForExit(timeout: .seconds(5))
            connection.close()
        }

        private func hasOwner(_ name: String) async throws -> Bool {
            try await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameHasOwner", arguments: [.string(name)]
            ).first?.bool ?? false
        }

        /// A key pressed and released, as a person's keyboard would (evdev KEY_A).
        func type() async throws {
            let remote = "org.gnome.Mutter.RemoteDesktop"
            if session == nil {
                session = try await connection.call(
                    destination: remote, path: "/org/gnome/Mutter/RemoteDesktop", interface: remote,
                    member: "CreateSession"
                ).first?.objectPath
                _ = try await connection.call(
                    destination: remote, path: session ?? "/", interface: remote + ".Session", member: "Start")
            }
            for pressed in [true, false] {
                _ = try await connection.call(
                    destination: remote, path: session ?? "/", interface: remote + ".Session",
                    member: "NotifyKeyboardKeycode", arguments: [.uint32(30), .bool(pressed)])
            }
        }
    }

    enum IdleWatchNames {
        static let monitor = "org.gnome.Mutter.IdleMonitor"
    }

    /// The broker's signals, as an app hears them.
    private static func listen(_ env: BrokerEnvironment) async throws -> (DBusConnection, AsyncStream<DBusSignal>) {
        let app = try await offThePool { try DBusConnection(address: env.bus.address) }
        let signals = try await app.signals(
            matching: DBusMatchRule(path: BrokerNames.objectPath, interface: BrokerNames.interface))
        return (app, signals)
    }

    /// The next of `members` on `stream`, within `timeout`.
    private static func next(
        _ members: Set<String>, on stream: AsyncStream<DBusSignal>, timeout: Duration = .seconds(15)
    ) async throws -> DBusSignal {
        guard let found = await within(timeout, { await stream.first { members.contains($0.member) } }) else {
            throw ProcessFailure("none of \(members) within \(timeout)")
        }
        return found
    }

    private static func deadlineProperty(_ connection: DBusConnection) async throws -> UInt64? {
        try await connection.call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath,
            interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(BrokerNames.interface), .string(Broker1Property.signOutDeadline.rawValue)]
        ).first?.uint64
    }

    private static func start(_ env: BrokerEnvironment, in directory: TemporaryDirectory) throws {
        let config = try directory.write("idle.conf", #"{"idleSignOutSeconds": 15, "idleWarningSeconds": 10}"#)
        chmod(config, 0o600)
        try env.restartBroker(extraArguments: ["--config", config])
    }

    @Test("inactivity warns three apps, activity in the warning cancels it, inactivity to the deadline signs out")
    func warnCancelThenSignOut() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let mutter = try await HeadlessMutter(bus: env.bus, in: env.directory)
        defer { withExtendedLifetime(mutter) {} }
        try await offThePool { try Self.start(env, in: env.directory) }
        // The source named with the program that owns its name (an app could have taken it first).
        let info = try await offThePool { try env.brokerctl(["device-info"]) }.stdout
        #expect(info.contains(IdleWatchNames.monitor + ", served by /usr/bin/mutter (pid "), "\(info)")
        var apps: [(DBusConnection, AsyncStream<DBusSignal>)] = []
        for _ in 0..<3 { apps.append(try await Self.listen(env)) }
        defer { for (app, _) in apps { app.close() } }
        // brokerctl watch, and an app on the client library, hear the same.
        let watcher = try await offThePool { try env.watch() }
        let library = try PublicClientApplication(
            clientId: "notes-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let warnings = try await library.signOutWarnings()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        try await mutter.type()

        for (_, signals) in apps {
            let signedIn = try await Self.next(["AccountChanged"], on: signals)
            #expect(signedIn.arguments.last?.string == "signed-in")
        }

        // Inactive: every app is warned, with the deadline, which the property shows.
        var deadlines: [UInt64] = []
        for (_, signals) in apps {
            let pending = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
            #expect(pending.arguments.first?.string == "idle")
            deadlines.append(pending.arguments.dropFirst().first?.uint64 ?? 0)
        }
        let now = UInt64(Date().timeIntervalSince1970 * 1_000_000)
        // The warning's 10 s, up to the next whole second (deadlines are whole seconds).
        #expect(deadlines.allSatisfy { $0 == deadlines[0] && $0 > now && $0 <= now + 11_000_000 }, "\(deadlines)")
        #expect(try await Self.deadlineProperty(apps[0].0) == deadlines[0])

        // The person touches the keyboard: cancelled, still signed in.
        try await mutter.type()
        for (_, signals) in apps {
            let cancelled = try await Self.next(
                [Broker1Signal.signOutCancelled.rawValue, "AccountChanged"], on: signals)
            #expect(
                cancelled.member == Broker1Signal.signOutCancelled.rawValue
                    && cancelled.arguments.first?.string == "idle")
        }
        #expect(try await Self.deadlineProperty(apps[0].0) == 0)
        let heard = await Self.first(2, of: warnings)
        #expect(heard == [.pending(reason: .idle, deadline: deadlines[0]), .cancelled(reason: .idle)], "\(heard)")
        try await offThePool {
            _ = try watcher.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("sign-out pending (idle): in ") }
            _ = try watcher.waitForLine(timeout: .seconds(10)) { $0 == "sign-out cancelled (idle)" }
        }

        // Inactive again, to the deadline: every app hears the sign-out, with its cause, each in a
        // task of its own so that when each heard it is known.
        let heardAt = try await Self.eachApp(apps) { signals in
            let pending = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
            let signedOut = try await Self.next(["AccountChanged"], on: signals)
            let at = Self.microsecondsNow()
            #expect(signedOut.arguments.last?.string == "signed-out")
            #expect(signedOut.arguments.dropFirst().first?.vardict?[AccountKey.signOutCause]?.string == "idle")
            return (at, pending.arguments.dropFirst().first?.uint64 ?? 0)
        }
        let deadline = Int64(heardAt.map(\.1).max() ?? 0)
        #expect(heardAt.allSatisfy { $0.0 >= deadline }, "signed out before the deadline: \(heardAt)")
        #expect(try await Self.deadlineProperty(apps[0].0) == 0)
        let current = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "notes-app", "--json"])
        }
        #expect(try current.json()["current"] is NSNull)
        try await offThePool {
            _ = try watcher.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("signed-out (idle)") }
        }

        // The reference, in the same run: an app's SignOut, from the call to the last app's AccountChanged.
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        try await mutter.type()
        for (_, signals) in apps { _ = try await Self.next(["AccountChanged"], on: signals) }
        let called = Self.microsecondsNow()
        let caller = apps[0].0
        let signOut = Task {
            try await caller.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                member: Broker1Method.signOut.rawValue,
                arguments: [.string("mail-app"), .string(""), .vardict([:])])
        }
        let referenceAt = try await Self.eachApp(apps) { signals in
            _ = try await Self.next(["AccountChanged"], on: signals)
            return (Self.microsecondsNow(), 0)
        }
        _ = try await signOut.value
        let idleMs = Double((heardAt.map(\.0).max() ?? 0) - deadline) / 1000
        let referenceMs = Double((referenceAt.map(\.0).max() ?? 0) - called) / 1000
        print(
            "FIGURE idle sign-out: deadline to the last of 3 apps' AccountChanged \(idleMs) ms; "
                + "reference, an app's SignOut call to the last AccountChanged \(referenceMs) ms")
    }

    /// `body` run for each app's signals at once; what each returned, in the apps' order.
    private static func eachApp(
        _ apps: [(DBusConnection, AsyncStream<DBusSignal>)],
        _ body: @escaping @Sendable (AsyncStream<DBusSignal>) async throws -> (Int64, UInt64)
    ) async throws -> [(Int64, UInt64)] {
        try await withThrowingTaskGroup(of: (Int, (Int64, UInt64)).self) { group in
            for (index, (_, signals)) in apps.enumerated() { group.addTask { (index, try await body(signals)) } }
            var results = [(Int64, UInt64)](repeating: (0, 0), count: apps.count)
            for try await (index, result) in group { results[index] = result }
            return results
        }
    }

    /// The realtime clock in microseconds, as the broker's deadlines are given.
    private static func microsecondsNow() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1_000
    }

    /// The first `count` warnings of `stream`, waiting at most 15 s.
    private static func first(_ count: Int, of stream: AsyncStream<SignOutWarning>) async -> [SignOutWarning] {
        await within(.seconds(15)) { await stream.prefix(count).reduce(into: []) { $0.append($1) } } ?? []
    }

    /// From the attacker's side: an app owning no name learns how far mutter's watch ids have got
    /// (by adding a watch of its own) and sends brokerd `WatchFired` for every id up to there, as
    /// if mutter said the person came back. Only mutter, the idle monitor's owner, is believed:
    /// the person stays idle, and the device is signed out at the deadline.
    @Test("an app forging the idle monitor's WatchFired during the warning does not keep the person signed in")
    func forgedActivity() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let mutter = try await HeadlessMutter(bus: env.bus, in: env.directory)
        defer { withExtendedLifetime(mutter) {} }
        try await offThePool { try Self.start(env, in: env.directory) }
        let (app, signals) = try await Self.listen(env)
        defer { app.close() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        _ = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
        let forger = try await ForgingApp(bus: env.bus)
        let newest =
            try await forger.connection.call(
                destination: IdleWatchNames.monitor, path: "/org/gnome/Mutter/IdleMonitor/Core",
                interface: IdleWatchNames.monitor, member: "AddUserActiveWatch"
            ).first?.uint32 ?? 16
        for id in 1...(newest + 4) {
            try await forger.forge(
                path: "/org/gnome/Mutter/IdleMonitor/Core", interface: IdleWatchNames.monitor, member: "WatchFired",
                arguments: [.uint32(id)])
        }
        let next = try await Self.next([Broker1Signal.signOutCancelled.rawValue, "AccountChanged"], on: signals)
        #expect(next.member == "AccountChanged" && next.arguments.last?.string == "signed-out", "\(next.member)")
        #expect(next.arguments.dropFirst().first?.vardict?[AccountKey.signOutCause]?.string == "idle")
    }

    @Test("brokerd killed during the warning: restarted after the deadline, the device is signed out at once")
    func killedDuringTheWarning() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let mutter = try await HeadlessMutter(bus: env.bus, in: env.directory)
        defer { withExtendedLifetime(mutter) {} }
        try await offThePool { try Self.start(env, in: env.directory) }
        let (app, signals) = try await Self.listen(env)
        defer { app.close() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let pending = try await Self.next([Broker1Signal.signOutPending.rawValue], on: signals)
        let deadline = pending.arguments.dropFirst().first?.uint64 ?? 0
        #expect(try env.stateFile()["signOutDeadline"] as? Int == Int(deadline / 1_000_000))
        env.brokerd.process.signal(SIGKILL)
        _ = try await offThePool { try env.brokerd.process.waitForExit(timeout: .seconds(10)) }
        // The deadline passes while no broker runs.
        while UInt64(Date().timeIntervalSince1970 * 1_000_000) < deadline + 1_000_000 {
            try await Task.sleep(for: .milliseconds(100))  // waiting for the clock to pass the deadline
        }
        try await offThePool { try Self.start(env, in: env.directory) }
        let current = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        }
        #expect(try current.json()["current"] is NSNull, "never a silently extended session")
        #expect(try env.stateFile()["signOutDeadline"] == nil)
    }
}
