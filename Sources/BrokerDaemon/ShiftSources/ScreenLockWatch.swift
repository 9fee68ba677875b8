import BrokerCore
import DBus
import Glibc
import Logging

/// The session's screen lock, for `signOutOnLock`: the desktop's screensaver says it became
/// active (`ActiveChanged(true)` of `org.gnome.ScreenSaver` on GNOME, `org.freedesktop.ScreenSaver`
/// on KDE and Xfce) or logind locks the session (its session object's `Lock` signal on the system
/// bus, which `loginctl lock-session` and most lock screens use). Each ends the shift (cause
/// `lock`). Signals only: nothing is polled.
final class ScreenLockWatch: Sendable {
    static let screenSavers = ["org.gnome.ScreenSaver", "org.freedesktop.ScreenSaver"]

    private let tasks: [Task<Void, Never>]
    /// What the watch listens to, in words, for the start-up's log and the device information.
    let sources: [String]
    private let systemBus: DBusConnection?

    /// Subscribes on `session` (and the system bus, for logind); `locked` is called at each lock.
    static func start(
        session: DBusConnection, logger: Logger, locked: @escaping @Sendable () async -> Void
    ) async -> ScreenLockWatch {
        var tasks: [Task<Void, Never>] = []
        var sources: [String] = []
        for name in screenSavers {
            // Subscribed whether or not the screensaver runs now: a desktop may start it later.
            guard
                let signals = try? await session.signals(
                    matching: DBusMatchRule(interface: name, member: "ActiveChanged"))
            else { continue }
            tasks.append(
                Task {
                    for await signal in signals where signal.arguments.first?.bool == true {
                        logger.notice("the screen was locked", metadata: ["by": "\(name)"])
                        await locked()
                    }
                })
            if (try? await hasOwner(name, on: session)) == true { sources.append(name) }
        }
        let (systemBus, logind) = await logindSession(logger: logger)
        if let systemBus, let logind,
            let signals = try? await systemBus.signals(
                matching: DBusMatchRule(
                    sender: "org.freedesktop.login1", path: logind, interface: "org.freedesktop.login1.Session",
                    member: "Lock"))
        {
            tasks.append(
                Task {
                    for await _ in signals {
                        logger.notice("the session was locked", metadata: ["by": "logind"])
                        await locked()
                    }
                })
            sources.append("logind \(logind)")
        }
        return ScreenLockWatch(tasks: tasks, sources: sources, systemBus: systemBus)
    }

    private init(tasks: [Task<Void, Never>], sources: [String], systemBus: DBusConnection?) {
        self.tasks = tasks
        self.sources = sources
        self.systemBus = systemBus
    }

    deinit {
        for task in tasks { task.cancel() }
        systemBus?.close()
    }

    private static func hasOwner(_ name: String, on connection: DBusConnection) async throws -> Bool {
        try await connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "NameHasOwner", arguments: [.string(name)], timeout: .seconds(5)
        ).first?.bool ?? false
    }

    /// The system bus and this login session's object at logind (from `XDG_SESSION_ID`, else
    /// the session of this process); nils where there is none, as in a container.
    private static func logindSession(logger: Logger) async -> (DBusConnection?, String?) {
        guard let bus = try? DBusConnection.systemBus(logger: logger) else { return (nil, nil) }
        let manager = (
            destination: "org.freedesktop.login1", path: "/org/freedesktop/login1",
            interface: "org.freedesktop.login1.Manager"
        )
        let reply: [DBusValue]?
        if let id = getenv("XDG_SESSION_ID").map({ String(cString: $0) }), !id.isEmpty {
            reply = try? await bus.call(
                destination: manager.destination, path: manager.path, interface: manager.interface,
                member: "GetSession", arguments: [.string(id)], timeout: .seconds(5))
        } else {
            reply = try? await bus.call(
                destination: manager.destination, path: manager.path, interface: manager.interface,
                member: "GetSessionByPID", arguments: [.uint32(UInt32(getpid()))], timeout: .seconds(5))
        }
        guard let path = reply?.first?.objectPath else {
            bus.close()
            return (nil, nil)
        }
        return (bus, path)
    }
}
