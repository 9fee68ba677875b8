import BrokerCore
import DBus
import Glibc
import Logging

/// The person's inactivity from logind: its session's `IdleHint`, which the desktop sets (and
/// logind announces with `PropertiesChanged`) for desktops with neither GNOME's idle monitor nor
/// `org.freedesktop.ScreenSaver`'s idle time. Signals and one armed timer: nothing is polled.
///
/// The hint turns true only after the desktop's own idle delay (GNOME's `idle-delay`, a screen
/// saver's timeout), and `IdleSinceHint` says when it did. The quiet part counts from then, so
/// the warning comes that delay later than with the other sources: brokerd cannot know the
/// delay, and starting earlier would guess. The administrator shortens the desktop's delay, or
/// `idleSignOutSeconds`, to make up for it (docs/kiosk.md).
final class LogindIdle: IdleSource {
    let source: String
    var busName: String? { nil }
    private let listener: Task<Void, Never>
    private let bus: DBusConnection

    private init(source: String, listener: Task<Void, Never>, bus: DBusConnection) {
        self.source = source
        self.listener = listener
        self.bus = bus
    }

    deinit {
        listener.cancel()
        bus.close()
    }

    /// Follows this session's `IdleHint` when logind has the session; nil when not.
    static func start(idle: IdleSignOut, broker: Broker, logger: Logger) async -> LogindIdle? {
        guard let (bus, path) = await LogindSession.find(logger: logger) else { return nil }
        guard
            let changes = try? await bus.signals(
                matching: DBusPropertiesChange.rule(
                    sender: LogindSession.busName, path: path, interface: LogindSessionObject.interface)),
            let initial = await hint(bus, path)
        else {
            bus.close()
            return nil
        }
        let listener = Task {
            var timer: Task<Void, Never>?
            func follow(_ hint: Hint) async {
                timer?.cancel()
                timer = nil
                guard hint.idle else { return await broker.personActive() }
                // Unknown (0) or ahead of this clock: counted from now.
                let now = realtimeMicroseconds()
                let since = hint.since == 0 ? now : min(hint.since, now)
                let wait =
                    Duration.microseconds(Int64(clamping: since)) + .seconds(idle.quiet)
                    - .microseconds(Int64(clamping: now))
                timer = Task {
                    if wait > .zero {
                        do { try await Task.sleep(for: wait) } catch { return }
                    }
                    await broker.personInactive()
                }
            }
            await follow(initial)
            for await change in changes where mentionsIdleHint(change) {
                guard let hint = await hint(bus, path) else { continue }
                await follow(hint)
            }
            timer?.cancel()
        }
        logger.info(
            "watching the person's inactivity",
            metadata: ["source": "logind IdleHint \(path)", "quiet": "\(idle.quiet) s after the hint"])
        return LogindIdle(source: "logind IdleHint (\(path))", listener: listener, bus: bus)
    }

    struct Hint: Sendable {
        var idle: Bool
        /// `IdleSinceHint`: microseconds of the realtime clock; 0 when unknown.
        var since: UInt64
    }

    /// The session's hint, read rather than taken from the signal: logind may announce a
    /// property as changed without its value.
    private static func hint(_ bus: DBusConnection, _ path: String) async -> Hint? {
        let session = LogindSessionObject(bus, destination: LogindSession.busName, path: path)
        guard let idle = try? await session.idleHint(timeout: .seconds(5)) else { return nil }
        return Hint(idle: idle, since: (try? await session.idleSinceHint(timeout: .seconds(5))) ?? 0)
    }

    private static func mentionsIdleHint(_ signal: DBusSignal) -> Bool {
        guard let change = DBusPropertiesChange(signal), change.interface == LogindSessionObject.interface else {
            return false
        }
        return change.mentions("IdleHint")
    }

    private static func realtimeMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return UInt64(max(0, now.tv_sec)) * 1_000_000 + UInt64(max(0, now.tv_nsec)) / 1000
    }
}
