import BrokerCore
import DBus
import Logging

/// The session's screen lock, for `signOutOnLock`: the desktop's screensaver says it became
/// active (`ActiveChanged(true)` of `org.gnome.ScreenSaver` on GNOME, `org.freedesktop.ScreenSaver`
/// on KDE, `org.xfce.ScreenSaver` from xfce4-screensaver, `org.mate.ScreenSaver` on MATE; each a
/// descendant of gnome-screensaver's interface) or logind locks the session (its session
/// object's `Lock` signal on the system bus, which `loginctl lock-session` and most lock screens
/// use). Each ends the shift (cause `lock`). Signals only: nothing is polled.
///
/// Only the screensavers running when brokerd starts are listened to, each believed from its
/// name's owner alone: the names of the others are free for any app to take (on GNOME nobody
/// owns `org.mate.ScreenSaver`), and an app owning one could sign the person out at will.
final class ScreenLockWatch: Sendable {
    static let screenSavers = [
        "org.gnome.ScreenSaver", "org.freedesktop.ScreenSaver", "org.xfce.ScreenSaver", "org.mate.ScreenSaver",
    ]

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
            // Only the name's owner is believed: any app may send a signal claiming the interface.
            guard (try? await hasOwner(name, on: session)) == true,
                let signals = try? await session.signals(
                    matching: DBusMatchRule(sender: name, interface: name, member: "ActiveChanged"))
            else { continue }
            tasks.append(
                Task {
                    for await signal in signals where signal.arguments.first?.bool == true {
                        logger.notice("the screen was locked", metadata: ["by": "\(name)"])
                        await locked()
                    }
                })
            sources.append(name)
        }
        let session = await LogindSession.find(logger: logger)
        let (systemBus, logind) = (session?.bus, session?.path)
        if let systemBus, let logind,
            let signals = try? await systemBus.signals(
                matching: DBusMatchRule(
                    sender: LogindSession.busName, path: logind, interface: LogindSession.sessionInterface,
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
}
