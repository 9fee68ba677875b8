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
    /// Each screensaver's name (its interface's too), its `ActiveChanged` rule from that name, and
    /// whether a signal is its `ActiveChanged(true)`, read as its interface declares it.
    static let screenSavers: [(name: String, rule: DBusMatchRule, activated: @Sendable (DBusSignal) -> Bool)] = [
        (
            GnomeScreenSaver.interface, GnomeScreenSaver.ActiveChanged.rule(sender: GnomeScreenSaver.interface),
            { (try? GnomeScreenSaver.ActiveChanged($0).newValue) == true }
        ),
        (
            FreedesktopScreenSaver.interface,
            FreedesktopScreenSaver.ActiveChanged.rule(sender: FreedesktopScreenSaver.interface),
            { (try? FreedesktopScreenSaver.ActiveChanged($0).value) == true }
        ),
        (
            XfceScreenSaver.interface, XfceScreenSaver.ActiveChanged.rule(sender: XfceScreenSaver.interface),
            { (try? XfceScreenSaver.ActiveChanged($0).newValue) == true }
        ),
        (
            MateScreenSaver.interface, MateScreenSaver.ActiveChanged.rule(sender: MateScreenSaver.interface),
            { (try? MateScreenSaver.ActiveChanged($0).newValue) == true }
        ),
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
        for (name, rule, activated) in screenSavers {
            // Only the name's owner is believed: any app may send a signal claiming the interface.
            guard await BusDriver.hasOwner(name, on: session), let signals = try? await session.signals(matching: rule)
            else { continue }
            tasks.append(
                Task {
                    for await signal in signals where activated(signal) {
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
                matching: LogindSessionObject.Lock.rule(sender: LogindSession.busName, path: logind))
        {
            tasks.append(
                Task {
                    for await signal in signals where (try? LogindSessionObject.Lock(signal)) != nil {
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
}
