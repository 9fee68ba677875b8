import BrokerCore
import DBus
import Logging

/// The person's inactivity from `org.freedesktop.ScreenSaver`'s `GetSessionIdleTime` (KDE's
/// screen locker serves it on X11), for desktops without GNOME's idle monitor. The interface has
/// no signal for idleness, so brokerd asks, and only while someone is signed in:
/// - outside a warning, next when the quiet part could be over at the earliest (an idle time
///   grows no faster than the clock): one call per quiet period while the person works, none
///   more often than `warningPoll`;
/// - during the warning, every `warningPoll` (1 s), so that a person who comes back sees the
///   warning withdrawn within a second; a warning lasts `idleWarningSeconds`, so that bounds
///   the calls too.
///
/// Units: the value is read as milliseconds. KDE's implementation (kscreenlocker) returns
/// KIdleTime's idle time, in milliseconds, although its interface file names the argument
/// `seconds`; the freedesktop idle-inhibition draft does not define the method, and
/// xfce4-screensaver does not implement it (it serves `org.xfce.ScreenSaver`). Reading a
/// service that counts seconds as milliseconds makes the person look less idle, never more: a
/// warning late or never, never someone at work signed out. KDE on Wayland refuses the call
/// (NotSupported): then this source is not used, and logind's IdleHint is the next.
final class ScreenSaverIdle: IdleSource {
    static let busName = "org.freedesktop.ScreenSaver"
    /// KDE serves both; the freedesktop path first.
    static let paths = ["/org/freedesktop/ScreenSaver", "/ScreenSaver"]
    static let warningPoll: Duration = .seconds(1)
    /// Before asking again after a failed call.
    static let retry: Duration = .seconds(5)

    let source: String
    var busName: String? { Self.busName }
    private let poller: Task<Void, Never>

    private init(source: String, poller: Task<Void, Never>) {
        self.source = source
        self.poller = poller
    }

    deinit { poller.cancel() }

    /// Asks through `session` when a screensaver there answers `GetSessionIdleTime`; nil when not.
    static func start(
        session: DBusConnection, idle: IdleSignOut, broker: Broker, events: ShiftEvents, logger: Logger
    ) async -> ScreenSaverIdle? {
        guard await BusDriver.hasOwner(busName, on: session) else { return nil }
        var answering: String?
        for path in paths {
            do {
                _ = try await idleTime(session, path)
                answering = path
                break
            } catch {
                logger.debug(
                    "the screensaver does not tell the idle time here",
                    metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
        guard let path = answering else { return nil }
        // Subscribed before the first look at the account, so that no sign-in is missed.
        let changes = events.subscribe()
        let poller = Task {
            await poll(
                session, path, quiet: .seconds(idle.quiet), broker: broker, changes: changes, logger: logger)
        }
        logger.info(
            "watching the person's inactivity",
            metadata: ["source": "\(busName) \(path)", "quiet": "\(idle.quiet) s", "asked": "while signed in"])
        return ScreenSaverIdle(source: "\(busName) (GetSessionIdleTime at \(path))", poller: poller)
    }

    private static func idleTime(_ session: DBusConnection, _ path: String) async throws -> Duration {
        // Read as milliseconds, although the interface names the argument `seconds` (above).
        let milliseconds = try await FreedesktopScreenSaver(session, destination: busName, path: path)
            .getSessionIdleTime(timeout: .seconds(5)).seconds
        return .milliseconds(Int64(milliseconds))
    }

    private static func poll(
        _ session: DBusConnection, _ path: String, quiet: Duration, broker: Broker,
        changes: AsyncStream<ShiftEvents.Event>, logger: Logger
    ) async {
        var events = changes.makeAsyncIterator()
        var failing = false
        var previous: Duration?
        while !Task.isCancelled {
            guard broker.deviceAccount != nil else {
                // Nobody to sign out: nothing is asked until someone signs in.
                previous = nil
                while true {
                    guard let event = await events.next() else { return }  // stopped
                    if event == .signedIn(true) { break }
                }
                continue
            }
            var wait: Duration
            do {
                let idleFor = try await idleTime(session, path)
                if failing { logger.info("the screensaver tells the idle time again") }
                failing = false
                if broker.pendingSignOutDeadline != nil {
                    // The idle time fell: the person was active since the last answer.
                    if idleFor < quiet || previous.map({ idleFor < $0 }) == true {
                        await broker.personActive()
                    }
                    previous = idleFor
                    wait = warningPoll
                } else if idleFor >= quiet {
                    previous = idleFor
                    await broker.personInactive()
                    wait = warningPoll
                } else {
                    previous = nil
                    wait = max(quiet - idleFor, warningPoll)
                }
            } catch is CancellationError {
                return
            } catch {
                if !failing {
                    logger.warning(
                        "the screensaver does not tell the idle time; asking again",
                        metadata: ["error": "\(error)", "in": "\(retry)"])
                }
                failing = true
                wait = retry
            }
            do { try await Task.sleep(for: wait) } catch { return }
        }
    }
}
