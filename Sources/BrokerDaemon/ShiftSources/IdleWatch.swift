import BrokerCore
import DBus
import Locking
import Logging

/// The person's inactivity, for `idleSignOutSeconds`, from GNOME's idle monitor
/// (`org.gnome.Mutter.IdleMonitor`): an idle watch fires when the person has been inactive until
/// the warning is due, and a user-active watch (one-shot, armed then) when they are active again.
/// The core decides what that means; this only tells it. Watches and signals: nothing is polled.
final class IdleWatch: IdleSource {
    static let busName = "org.gnome.Mutter.IdleMonitor"
    static let path = "/org/gnome/Mutter/IdleMonitor/Core"

    private let listener: Task<Void, Never>
    var source: String { Self.busName }
    var busName: String? { Self.busName }

    private init(listener: Task<Void, Never>) { self.listener = listener }

    deinit { listener.cancel() }

    /// Watches through `session` when the idle monitor is there; nil (said by the caller) when not.
    static func start(session: DBusConnection, idle: IdleSignOut, broker: Broker, logger: Logger) async
        -> IdleWatch?
    {
        guard await BusDriver.hasOwner(busName, on: session),
            let fired = try? await session.signals(
                matching: MutterIdleMonitor.WatchFired.rule(sender: busName, path: path))
        else { return nil }
        let monitor = MutterIdleMonitor(session, destination: busName, path: path)
        func userActiveWatch() async -> UInt32? {
            try? await monitor.addUserActiveWatch(timeout: .seconds(5)).id
        }
        let quiet = UInt64(idle.quiet) * 1000  // milliseconds
        guard let idleWatch = try? await monitor.addIdleWatch(interval: quiet, timeout: .seconds(5)).id else {
            return nil
        }
        // A warning a previous run left pending needs the person's next activity too.
        let active = Locked<UInt32?>(broker.pendingSignOutDeadline != nil ? await userActiveWatch() : nil)
        let listener = Task {
            for await signal in fired {
                guard let id = try? MutterIdleMonitor.WatchFired(signal).id else { continue }
                if id == idleWatch {
                    await broker.personInactive()
                    let armed = await userActiveWatch()
                    active.withLock { $0 = armed }
                } else if id == active.withLock({ $0 }) {
                    active.withLock { $0 = nil }
                    await broker.personActive()
                }
            }
        }
        logger.info("watching the person's inactivity", metadata: ["source": "\(busName)", "quiet": "\(idle.quiet) s"])
        return IdleWatch(listener: listener)
    }
}
