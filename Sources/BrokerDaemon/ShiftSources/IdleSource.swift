import BrokerCore
import DBus
import Logging

/// A desktop service that tells brokerd the person's inactivity, for `idleSignOutSeconds`. Each
/// adapter calls the core's `personInactive()` once the person has been inactive for the quiet
/// part (`IdleSignOut.quiet`), and `personActive()` when they are active again; the core decides
/// what that means. An adapter works while it is kept, and stops when released.
protocol IdleSource: AnyObject, Sendable {
    /// What it listens to, in words, for the start-up's log and the device information.
    var source: String { get }
    /// The session bus name whose owner it believes (nil: logind, on the system bus, root's).
    var busName: String? { get }
}

enum IdleSources {
    /// What the start-up says when no source answered.
    static let offered =
        "GNOME's \(IdleWatch.busName), \(ScreenSaverIdle.busName)'s GetSessionIdleTime (KDE on X11), logind's IdleHint"

    /// The first source the session offers, in this order: GNOME's idle monitor (exact, and
    /// told by watches), `org.freedesktop.ScreenSaver` (exact, but it has to be asked), logind's
    /// `IdleHint` (told by signals, but only after the desktop's own idle delay). nil when none.
    static func first(
        session: DBusConnection, idle: IdleSignOut, service: BrokerService, logger: Logger
    ) async -> (any IdleSource)? {
        if let mutter = await IdleWatch.start(session: session, idle: idle, broker: service.broker, logger: logger) {
            return mutter
        }
        if let screenSaver = await ScreenSaverIdle.start(
            session: session, idle: idle, broker: service.broker, events: service.shiftEvents, logger: logger)
        {
            return screenSaver
        }
        return await LogindIdle.start(idle: idle, broker: service.broker, logger: logger)
    }
}
