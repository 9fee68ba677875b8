import BrokerCore
import Locking

/// What brokerd's shift adapters follow of the core, in the order it happened: whether someone is
/// signed in (an idle source that has to ask the desktop asks only then) and the warnings of a
/// sign-out (the person's notification). The service's announcement closures publish here, so the
/// core stays unaware of them: from the desktop side it hears only `personInactive`/`personActive`.
final class ShiftEvents: Sendable {
    enum Event: Sendable, Equatable {
        /// The device's account changed: someone is (true) or nobody is (false) signed in.
        case signedIn(Bool)
        case warning(ShiftWarning)
    }

    private let subscribers = Locked<(next: UInt64, all: [UInt64: AsyncStream<Event>.Continuation])>((0, [:]))

    /// Hands `event` to every subscriber; never waits (the core calls it from its actor).
    func publish(_ event: Event) {
        for subscriber in subscribers.withLock({ Array($0.all.values) }) { subscriber.yield(event) }
    }

    /// The events from now on. Bounded: a subscriber that stopped reading keeps the newest.
    func subscribe() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(64))
        let id = subscribers.withLock { subscribers in
            let id = subscribers.next
            subscribers.next += 1
            subscribers.all[id] = continuation
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.all.removeValue(forKey: id) }
        }
        return stream
    }
}
