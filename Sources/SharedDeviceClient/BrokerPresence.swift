import BrokerAPI
import DBus

/// The broker leaving the bus and coming back, as the bus announces the owner of its name.
public enum BrokerPresence: Sendable, Equatable {
    /// The broker left the bus: it stopped, failed, or is restarting. Calls fail with
    /// ``BrokerError/brokerUnavailable(_:)`` (or start it again, where the bus activates it).
    case left
    /// A broker owns the name again. ``PublicClientApplication/accountChanges`` then reports its
    /// state (``AccountChange/Reason/brokerRestarted``).
    case returned
}

extension PublicClientApplication {
    /// The broker leaving the bus and returning, from the moment this returns (the bus has the
    /// match rule) until the consumer stops or the connection to the bus ends (the sequence then
    /// ends too). ``accountChanges`` says nothing while the broker is away, since nothing changed
    /// that it knows of; this is how an app (or `brokerctl watch`) tells the person it is.
    public func brokerPresence() async throws(BrokerError) -> AsyncStream<BrokerPresence> {
        let connection = try link.connection()
        let owners: AsyncStream<DBusSignal>
        do {
            owners = try await connection.signals(matching: DBusNameOwnerChange.rule(for: BrokerNames.busName))
        } catch {
            throw BusLink.brokerError(error)
        }
        let (stream, continuation) = AsyncStream<BrokerPresence>.makeStream(bufferingPolicy: .unbounded)
        let reader = Task {
            for await signal in owners {
                guard let change = DBusNameOwnerChange(signal) else { continue }
                continuation.yield(change.newOwner == nil ? .left : .returned)
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in reader.cancel() }
        return stream
    }
}
