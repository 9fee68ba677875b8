import BrokerAPI
import DBus

/// Feeds ``PublicClientApplication/accountChanges``: the `AccountChanged` signal, kept alive
/// across broker restarts (`NameOwnerChanged` for the broker's name) and dropped bus connections
/// (reconnects with backoff), until the consumer cancels.
///
/// After a broker restart, or a new bus connection, it reports the broker's state once as
/// ``AccountChange/Reason/brokerRestarted``, read from the `CurrentAccount` property (which,
/// unlike `GetCurrentAccount`, does not move the app's own previous account).
struct AccountChangeFeed: Sendable {
    let link: BusLink
    let queryTimeout: Duration

    /// Backoff between reconnection attempts: doubles from the first to the last.
    static let firstBackoff: Duration = .milliseconds(100)
    static let lastBackoff: Duration = .seconds(5)

    private enum Event: Sendable {
        case signal(DBusSignal)
        case brokerAppeared
        case connectionLost
    }

    /// One subscription on one connection: both match rules in place.
    struct Subscription: Sendable {
        let changes: AsyncStream<DBusSignal>
        let owners: AsyncStream<DBusSignal>
    }

    /// Adds both match rules on the current connection; returns once the bus has them.
    func subscribe() async throws(BrokerError) -> Subscription {
        let connection = try link.connection()
        do {
            let changes = try await connection.signals(matching: Broker1Signals.AccountChanged.rule())
            let owners = try await connection.signals(matching: DBusNameOwnerChange.rule(for: BrokerNames.busName))
            return Subscription(changes: changes, owners: owners)
        } catch {
            throw BusLink.brokerError(error)
        }
    }

    /// A stream that starts with `first` (already subscribed) and goes on until cancelled.
    func stream(startingWith first: Subscription?) -> AsyncThrowingStream<AccountChange, any Error> {
        let (stream, continuation) = AsyncThrowingStream<AccountChange, any Error>.makeStream(
            bufferingPolicy: .unbounded)
        let task = Task {
            await run(first: first, continuation: continuation)
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    private func run(first: Subscription?, continuation: AsyncThrowingStream<AccountChange, any Error>.Continuation)
        async
    {
        var subscription = first
        var lastKnown: Account?? = nil  // nil: not known yet
        var backoff = Self.firstBackoff
        var resynchronize = false
        while !Task.isCancelled && !link.isClosed {
            if subscription == nil {
                do {
                    subscription = try await subscribe()
                } catch {
                    // No bus (or it refused us): try again later, never in a tight loop.
                    do { try await Task.sleep(for: backoff) } catch { return }
                    backoff = min(backoff * 2, Self.lastBackoff)
                    continue
                }
            }
            guard let current = subscription else { continue }
            backoff = Self.firstBackoff
            if resynchronize {
                await report(previous: &lastKnown, continuation: continuation)
            }
            for await event in merged(current) {
                switch event {
                case .signal(let signal):
                    guard let heard = try? Broker1Signals.AccountChanged(signal) else { continue }
                    let change = AccountChange(heard)
                    lastKnown = .some(change.current)
                    continuation.yield(change)
                case .brokerAppeared:
                    await report(previous: &lastKnown, continuation: continuation)
                case .connectionLost:
                    break
                }
            }
            // The connection dropped (or we were cancelled): subscribe again on a new one, then
            // tell the app where things stand, since signals may have been missed meanwhile.
            subscription = nil
            resynchronize = true
        }
    }

    /// Reports the broker's current state once.
    private func report(
        previous lastKnown: inout Account??,
        continuation: AsyncThrowingStream<AccountChange, any Error>.Continuation
    ) async {
        // Not `try?`: it flattens the optional, and nobody signed in would read as a failure.
        let current: Account?
        do { current = try await currentAccountProperty() } catch { return }
        continuation.yield(AccountChange(current: current, previous: lastKnown ?? nil, reason: .brokerRestarted))
        lastKnown = .some(current)
    }

    /// The broker's `CurrentAccount` property.
    func currentAccountProperty() async throws(BrokerError) -> Account? {
        try await link.currentAccountProperty(timeout: queryTimeout)
    }

    /// Both signal streams as one, ending with `connectionLost` when either finishes.
    private func merged(_ subscription: Subscription) -> AsyncStream<Event> {
        let (events, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .unbounded)
        let changes = Task {
            for await signal in subscription.changes { continuation.yield(.signal(signal)) }
            continuation.yield(.connectionLost)
            continuation.finish()
        }
        let owners = Task {
            for await signal in subscription.owners {
                // A new owner is a (new) broker.
                if DBusNameOwnerChange(signal)?.newOwner != nil {
                    continuation.yield(.brokerAppeared)
                }
            }
            continuation.yield(.connectionLost)
            continuation.finish()
        }
        continuation.onTermination = { _ in
            changes.cancel()
            owners.cancel()
        }
        return events
    }
}

extension AccountChange {
    /// The change an `AccountChanged` signal announces. A reason a newer broker names and this
    /// library does not know reads as what the current account says.
    init(_ heard: Broker1Signals.AccountChanged) {
        self.init(
            current: heard.current, previous: heard.previous?.account,
            reason: Reason(rawValue: heard.reason) ?? (heard.current == nil ? .signedOut : .signedIn),
            cause: heard.previous?.signOutCause)
    }
}
