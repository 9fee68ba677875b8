import BrokerAPI
import DBus
import Locking
import Logging

/// The application object's one connection to the bus, opened again on the next use after the
/// bus dropped it. Every call to the broker goes through ``call(_:_:timeout:)`` or, on a connection
/// of its own, ``askOnce(_:address:timeout:)``; ``brokerError(_:)`` and ``cannotConnect(_:address:)`` are
/// the one place where D-Bus errors become ``BrokerError``s.
final class BusLink: Sendable {
    private enum State {
        case open(DBusConnection)
        case dropped
        case closed
    }

    private let address: String?
    private let logger: Logger
    private let state: Locked<State>

    /// Connects now, so that an app without a bus learns it at once.
    init(address: String?) throws(BrokerError) {
        self.address = address
        logger = Logger(label: "shared-device-client")
        state = Locked(.dropped)
        _ = try connection()
    }

    /// The open connection, or a new one when the bus dropped the last. Blocks the calling thread
    /// for the handshake when it connects.
    func connection() throws(BrokerError) -> DBusConnection {
        let current: State = state.withLock { state in
            if case .open(let connection) = state, !connection.isConnected { state = .dropped }
            return state
        }
        switch current {
        case .closed: throw BrokerError.brokerUnavailable("the application object was closed")
        case .open(let connection): return connection
        case .dropped: break
        }
        let fresh: DBusConnection
        do {
            fresh =
                try address.map { try DBusConnection(address: $0, logger: logger) }
                ?? DBusConnection.sessionBus(logger: logger)
        } catch {
            throw Self.cannotConnect(error, address: address)
        }
        // Another task may have reconnected meanwhile: keep one connection, close the other.
        let (kept, spare): (DBusConnection?, DBusConnection?) = state.withLock { state in
            switch state {
            case .closed: return (nil, fresh)
            case .open(let other) where other.isConnected: return (other, fresh)
            case .open, .dropped:
                state = .open(fresh)
                return (fresh, nil)
            }
        }
        spare?.close()
        guard let kept else { throw BrokerError.brokerUnavailable("the application object was closed") }
        return kept
    }

    /// Whether ``close()`` was called.
    var isClosed: Bool {
        state.withLock { state in
            if case .closed = state { return true }
            return false
        }
    }

    /// Closes the connection for good.
    func close() {
        let connection: DBusConnection? = state.withLock { state in
            defer { state = .closed }
            if case .open(let connection) = state { return connection }
            return nil
        }
        connection?.close()
    }

    /// Asks `query` over this link's connection.
    func ask<Answer>(_ query: BrokerQuery<Answer>, timeout: Duration) async throws(BrokerError) -> Answer {
        try query.decode(try await call(query.call, timeout: timeout))
    }

    /// Asks `query` on a connection of its own, opened to `address` (nil: the session bus) and
    /// closed with the answer, waiting on the calling thread: no connection thread, no task.
    static func askOnce<Answer>(_ query: BrokerQuery<Answer>, address: String?, timeout: Duration) throws(BrokerError)
        -> Answer
    {
        let connection: DBusBlockingConnection
        do {
            connection = try DBusBlockingConnection(address: address ?? DBusConnection.sessionBusAddress())
        } catch {
            throw cannotConnect(error, address: address)
        }
        let reply: [DBusValue]
        do {
            reply = try connection.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath,
                interface: BrokerNames.interface, member: query.call.method.rawValue,
                arguments: query.call.arguments, timeout: timeout)
        } catch {
            throw brokerError(error)
        }
        return try query.decode(reply)
    }

    /// Calls a method of the broker's interface.
    func call(_ call: Broker1Call, timeout: Duration) async throws(BrokerError) -> [DBusValue] {
        try await self.call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
            member: call.method.rawValue, arguments: call.arguments, timeout: timeout)
    }

    /// Calls any method, mapping errors. Task cancellation throws ``BrokerError/cancelled(_:)``.
    func call(
        destination: String, path: String, interface: String, member: String, arguments: [DBusValue],
        timeout: Duration
    ) async throws(BrokerError) -> [DBusValue] {
        let connection = try connection()
        do {
            return try await connection.call(
                destination: destination, path: path, interface: interface, member: member,
                arguments: arguments, timeout: timeout)
        } catch {
            throw Self.brokerError(error)
        }
    }

    /// What a failed call means for the app: the broker's error, no broker, a timeout, a
    /// cancellation, or any other D-Bus error.
    static func brokerError(_ error: any Error) -> BrokerError {
        switch error {
        case let error as DBusError: return BrokerError(error)
        case is CancellationError: return .cancelled("the call was cancelled")
        default: return .dbus(name: "org.freedesktop.DBus.Error.Failed", message: "\(error)")
        }
    }

    /// A failure to open a connection: no bus at that address (or none set). Still
    /// `brokerUnavailable` (worth a retry later), but named and worded as the bus's failure, not
    /// as a broker missing from a bus that answered (``BrokerError/errorName``).
    static func cannotConnect(_ error: any Error, address: String?) -> BrokerError {
        let reason = (error as? DBusError)?.message ?? "\(error)"
        let bus =
            address.map { "the bus at \($0)" }
            ?? (try? DBusConnection.sessionBusAddress()).map { "the session bus at \($0)" } ?? "the session bus"
        return .brokerUnavailable("\(BrokerError.cannotConnectPrefix) \(bus): \(reason)")
    }
}

extension DBusConnection {
    /// The signals `rule` matches, from the moment this returns (the bus has the match rule), each
    /// read by `read` (a generated `Broker1Signals` reader: one of another shape is dropped); the
    /// stream ends with the connection.
    func signals<Signal: Sendable>(
        _ rule: DBusMatchRule, as read: @escaping @Sendable (DBusSignal) throws(BrokerError) -> Signal
    ) async throws(BrokerError) -> AsyncStream<Signal> {
        let raw: AsyncStream<DBusSignal>
        do { raw = try await signals(matching: rule) } catch { throw BusLink.brokerError(error) }
        let (typed, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: .unbounded)
        let reader = Task {
            for await signal in raw {
                if let value = try? read(signal) { continuation.yield(value) }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in reader.cancel() }
        return typed
    }
}

extension BusLink {
    /// The broker's property `name` of `interface` (`org.freedesktop.DBus.Properties.Get`), the
    /// value inside its variant; the generated getters read it as the contract declares it.
    func property(_ interface: String, _ name: String, timeout: Duration) async throws(BrokerError) -> DBusValue {
        let reply = try await call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath,
            interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(interface), .string(name)], timeout: timeout)
        guard reply.count == 1, let value = reply.first?.variantValue else {
            throw .malformedReply("Get \(name) did not return one value")
        }
        return value
    }
}
