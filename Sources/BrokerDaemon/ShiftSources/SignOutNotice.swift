import BrokerCore
import DBus
import Locking
import Logging

/// The person is told, not only the apps: when a warning of a sign-out starts, a desktop
/// notification (`org.freedesktop.Notifications`) says when and why, with an action "Stay signed
/// in" whose invocation counts as the person's activity (the core's `personActive`). It is
/// withdrawn when the warning is cancelled or ends with the sign-out. With no notification server
/// on the session bus, one log line and nothing else: apps still hear `SignOutPending`.
final class SignOutNotice: Sendable {
    static let busName = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"
    /// The action's key, which `ActionInvoked` names.
    static let stayAction = "stay-signed-in"

    private let tasks: [Task<Void, Never>]

    private init(tasks: [Task<Void, Never>]) { self.tasks = tasks }

    /// Whole seconds left, rounded down: a deadline is the whole second after the full warning, so
    /// this is the warning's own length when it starts, never one more.
    static func secondsLeft(until deadline: Int64, clock: any WallClock) -> Int64 {
        max(0, (deadline &* 1_000_000 - clock.nowMicroseconds()) / 1_000_000)
    }

    deinit { for task in tasks { task.cancel() } }

    /// Follows `service`'s warnings from now on and tells the person through `session`.
    static func start(session: DBusConnection, service: BrokerService, clock: any WallClock, logger: Logger) async
        -> SignOutNotice
    {
        /// The notification on screen, if any: the one an action may name and a withdrawal closes.
        let shown = Locked<UInt32?>(nil)
        /// Every notice shown during the warning on now, which "Stay signed in" may come from, and
        /// the actions read while a Notify was being answered (the server sends the reply first,
        /// but the signal and the reply are handled by different tasks). Ids are the server's, shared
        /// by every app, so an action is believed only for a notice this broker posted: one read
        /// before its Notify left names another app's notice, or nothing, and is dropped. One lock,
        /// so that an action is either seen as its notice's or kept until the reply names it.
        let notices = Locked<(ofThisWarning: Set<UInt32>, asking: Bool, early: [UInt32])>(([], false, []))
        let warnings = service.shiftEvents.subscribe()
        var tasks: [Task<Void, Never>] = []
        // Subscribed whether or not a server runs now: one may be started (or activated) later.
        // A sender rule with a well-known name matches whoever owns it when the signal comes.
        if let actions = try? await session.signals(
            matching: Notifications.ActionInvoked.rule(sender: busName, path: path))
        {
            let broker = service.broker
            tasks.append(
                Task {
                    for await action in actions {
                        // Against every notice of this warning, not the one on screen: a server sends
                        // NotificationClosed with the action, and that may be handled first.
                        guard let invoked = try? Notifications.ActionInvoked(action),
                            invoked.actionKey == stayAction
                        else { continue }
                        let id = invoked.id
                        let known = notices.withLock { notices -> Bool in
                            guard notices.ofThisWarning.contains(id) else {
                                // Perhaps the notice whose Notify is being answered now; a few are kept.
                                if notices.asking { notices.early = Array((notices.early + [id]).suffix(8)) }
                                return false
                            }
                            return true
                        }
                        guard known else { continue }
                        logger.notice("the person chose to stay signed in", metadata: ["notification": "\(id)"])
                        await broker.personActive()
                    }
                })
        }
        if let closed = try? await session.signals(
            matching: Notifications.NotificationClosed.rule(sender: busName, path: path))
        {
            tasks.append(
                Task {
                    // Dismissed or expired: nothing left to withdraw, and nothing to replace.
                    for await signal in closed {
                        guard let id = try? Notifications.NotificationClosed(signal).id else { continue }
                        shown.withLock { if $0 == id { $0 = nil } }
                    }
                })
        }
        tasks.append(
            Task {
                var told = false  // that no server answered
                for await event in warnings {
                    guard case .warning(let warning) = event else { continue }
                    switch warning {
                    case .pending(let cause, let deadline):
                        notices.withLock {
                            $0.asking = true
                            $0.early = []
                        }
                        defer {
                            notices.withLock {
                                $0.asking = false
                                $0.early = []
                            }
                        }
                        do {
                            let id = try await notify(
                                session, replacing: shown.withLock { $0 },
                                body: body(seconds: Self.secondsLeft(until: deadline, clock: clock), cause: cause))
                            shown.withLock { $0 = id }
                            let chosen = notices.withLock { notices -> Bool in
                                notices.ofThisWarning.insert(id)
                                return notices.early.contains(id)
                            }
                            logger.info("told the person of the sign-out", metadata: ["notification": "\(id)"])
                            if chosen {
                                logger.notice("the person chose to stay signed in", metadata: ["notification": "\(id)"])
                                await service.broker.personActive()
                            }
                        } catch {
                            // Said once: a desktop without notifications stays without them.
                            logger.log(
                                level: told ? .debug : .notice,
                                Logger.Message(
                                    stringLiteral: "no notification server answered (\(busName)): the person is not "
                                        + "told of the sign-out on screen; apps still hear SignOutPending"),
                                metadata: ["error": "\(error)"])
                            told = true
                        }
                    case .cancelled, .over:
                        notices.withLock { $0 = ([], false, []) }
                        guard let id = shown.withLock({ $0 }) else { continue }
                        shown.withLock { $0 = nil }
                        // A notification the server closed already answers an error: nothing to do.
                        try? await Notifications(session, destination: busName, path: path)
                            .closeNotification(id: id, timeout: .seconds(5))
                    }
                }
            })
        return SignOutNotice(tasks: tasks)
    }

    /// Shows (or updates) the notification; its id.
    private static func notify(_ session: DBusConnection, replacing: UInt32?, body: String) async throws -> UInt32 {
        try await Notifications(session, destination: busName, path: path).notify(
            appName: "Shared device", replacesId: replacing ?? 0, appIcon: "system-log-out",
            summary: "Signing out soon", body: body, actions: [stayAction, "Stay signed in"],
            // Critical: a server keeps it on screen until it is withdrawn, rather than let it
            // expire while the countdown still runs.
            hints: ["urgency": .byte(2)], expireTimeout: 0, timeout: .seconds(5)
        ).id
    }

    /// What the person reads: when, and why.
    static func body(seconds: Int64, cause: SignOutCause) -> String {
        let when =
            seconds >= 120
            ? "\((seconds + 30) / 60) minutes" : seconds == 1 ? "1 second" : "\(seconds) seconds"
        let why = cause == .idle ? " because of inactivity" : ""
        return "You will be signed out in \(when)\(why). Use the device, or choose Stay signed in, to keep working."
    }
}
