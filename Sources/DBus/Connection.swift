import CDBus
import Glibc
import Logging

/// A private connection to a D-Bus message bus, owned by one dedicated thread.
///
/// All methods may be called from any thread or task. The connection is closed
/// by `close()` or when the last reference goes away.
public final class DBusConnection: Sendable {
    let loop: ConnectionLoop
    /// The unique bus name assigned by the bus (e.g. `:1.42`).
    public let uniqueName: String
    /// The logger used by this connection.
    public let logger: Logger

    private static let threadsInitialized: Bool = { dbus_threads_init_default() != 0 }()

    /// Connects to the session bus named by `DBUS_SESSION_BUS_ADDRESS`.
    public static func sessionBus(logger: Logger = Logger(label: "dbus")) throws -> DBusConnection {
        try DBusConnection(address: sessionBusAddress(), logger: logger)
    }

    /// The session bus's address, from `DBUS_SESSION_BUS_ADDRESS`; NotSupported when it is not set.
    public static func sessionBusAddress() throws(DBusError) -> String {
        guard let raw = getenv("DBUS_SESSION_BUS_ADDRESS"), raw.pointee != 0 else {
            throw DBusError(
                name: "org.freedesktop.DBus.Error.NotSupported",
                message: "DBUS_SESSION_BUS_ADDRESS is not set; no session bus available")
        }
        return String(cString: raw)
    }

    /// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS` or the default socket).
    public static func systemBus(logger: Logger = Logger(label: "dbus")) throws -> DBusConnection {
        let address =
            getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) } ?? "unix:path=/var/run/dbus/system_bus_socket"
        return try DBusConnection(address: address, logger: logger)
    }

    /// Opens a private connection to the bus at `address` and registers with it (Hello).
    /// Blocks the calling thread for the handshake.
    public init(address: String, logger: Logger = Logger(label: "dbus")) throws {
        let (connection, uniqueName) = try Self.openPrivate(address: address)
        self.uniqueName = uniqueName
        self.logger = logger
        let loop: ConnectionLoop
        do {
            loop = try ConnectionLoop(connection: connection, logger: logger)
            try loop.start()
        } catch {
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
            throw error
        }
        self.loop = loop
        logger.debug("Connected to D-Bus", metadata: ["uniqueName": "\(uniqueName)"])
    }

    deinit { loop.requestClose() }

    /// Opens a private libdbus connection to the bus at `address` and registers with it (Hello),
    /// blocking the calling thread for the handshake. The caller owns the connection (close and
    /// unref it). Shared by `DBusConnection` and `DBusBlockingConnection`.
    static func openPrivate(address: String) throws(DBusError) -> (connection: OpaquePointer, uniqueName: String) {
        _ = threadsInitialized
        guard DBusValidation.isValidString(address), !address.isEmpty else {
            throw DBusError.invalidArgs("Invalid bus address")
        }
        var err = CDBus.DBusError()
        dbus_error_init(&err)
        guard let connection = address.withCString({ dbus_connection_open_private($0, &err) }) else {
            throw DBusError(taking: &err, fallback: "Cannot connect to \(address)")
        }
        dbus_connection_set_exit_on_disconnect(connection, 0)
        guard dbus_bus_register(connection, &err) != 0, let unique = dbus_bus_get_unique_name(connection) else {
            let error = DBusError(taking: &err, fallback: "Cannot register with the bus at \(address)")
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
            throw error
        }
        return (connection, String(cString: unique))
    }

    /// Flushes queued messages, fails pending calls with Disconnected, finishes
    /// signal streams and closes the connection. Idempotent; does not block.
    public func close() { loop.requestClose() }

    /// Whether the connection is still open (not closed and not dropped by the bus).
    public var isConnected: Bool { loop.isOpen }

    /// Returns when the connection has been closed or dropped.
    public func waitUntilDisconnected() async { await loop.waitUntilClosed() }

    // MARK: Calls

    /// Calls a method and returns the reply's arguments.
    ///
    /// Throws `DBusError`: error replies keep their name and message; InvalidArgs
    /// for invalid names or values (checked before anything is sent); NoReply
    /// when `timeout` passes; Disconnected when the connection closes first.
    /// Throws `CancellationError` when the task is cancelled. An empty `interface`
    /// sends the call without an interface field (the peer dispatches by member).
    public func call(
        destination: String, path: String, interface: String, member: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) async throws -> [DBusValue] {
        let message = try MessageBuilder.methodCall(
            destination: destination, path: path,
            interface: interface.isEmpty ? nil : interface,
            member: member, arguments: arguments)
        return try await loop.call(message, timeout: timeout)
    }

    /// Calls a method and blocks the calling thread until the reply: for synchronous code that
    /// cannot `await` (a `save` that must finish before it returns, on an actor).
    ///
    /// The connection's own thread hands the reply over through a condition variable, so the
    /// wait never needs Swift's cooperative pool to make progress: unlike waiting on an async
    /// `call` with a semaphore, it cannot deadlock when every pool thread is busy. It does occupy
    /// the calling thread for the round trip, so keep it to quick calls and short timeouts.
    /// The reply needs no pool thread, but the peer may: an object exported in this same
    /// process answers from a Task, so do not call one from a pool thread.
    ///
    /// Throws like `call`: error replies keep their name and message; NoReply once `timeout`
    /// passes (if the connection thread should fail to answer at all, the wait still ends one
    /// second later with NoReply); Disconnected when the connection is or gets closed. Throws
    /// Failed when called on the connection's own thread (e.g. from an object's
    /// `propertyValues`), which would otherwise wait for itself forever.
    public func callBlocking(
        destination: String, path: String, interface: String, member: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) throws -> [DBusValue] {
        let message = try MessageBuilder.methodCall(
            destination: destination, path: path,
            interface: interface.isEmpty ? nil : interface,
            member: member, arguments: arguments)
        return try loop.callBlocking(message, timeout: timeout)
    }

    // MARK: Names

    /// Flags for `requestName`.
    public struct RequestNameFlags: OptionSet, Sendable {
        /// The raw `DBUS_NAME_FLAG_*` bits.
        public let rawValue: UInt32
        /// Creates flags from raw bits.
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        /// Allow another connection to take the name with `replaceExisting`.
        public static let allowReplacement = RequestNameFlags(rawValue: UInt32(CDBUS_NAME_FLAG_ALLOW_REPLACEMENT))
        /// Take the name from its owner if it allowed replacement.
        public static let replaceExisting = RequestNameFlags(rawValue: UInt32(CDBUS_NAME_FLAG_REPLACE_EXISTING))
        /// Do not wait in the queue when the name is taken.
        public static let doNotQueue = RequestNameFlags(rawValue: UInt32(CDBUS_NAME_FLAG_DO_NOT_QUEUE))
    }

    /// Result of `requestName`.
    public enum RequestNameReply: UInt32, Sendable {
        /// This connection now owns the name.
        case primaryOwner = 1
        /// Queued behind the current owner.
        case inQueue = 2
        /// Someone else owns it (with `doNotQueue`).
        case exists = 3
        /// This connection already owned it.
        case alreadyOwner = 4
    }

    /// Asks the bus for a well-known name (default: do not queue).
    public func requestName(_ name: String, flags: RequestNameFlags = .doNotQueue) async throws -> RequestNameReply {
        try DBusValidation.busName(name)
        let reply = try await callBus("RequestName", [.string(name), .uint32(flags.rawValue)])
        guard let code = reply.first?.uint32, let result = RequestNameReply(rawValue: code) else {
            throw DBusError.failed("Unexpected RequestName reply")
        }
        return result
    }

    /// Releases a well-known name.
    public func releaseName(_ name: String) async throws {
        try DBusValidation.busName(name)
        _ = try await callBus("ReleaseName", [.string(name)])
    }

    private func callBus(_ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
        try await call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: member, arguments: arguments)
    }

    // MARK: Signals

    /// Emits a signal (broadcast, or unicast when `destination` is set).
    public func emitSignal(
        path: String, interface: String, member: String, arguments: [DBusValue] = [],
        destination: String? = nil
    ) throws {
        let message = try MessageBuilder.signal(
            path: path, interface: interface, member: member,
            destination: destination, arguments: arguments)
        guard loop.enqueue(.send(message)) else {
            message.release()
            throw DBusError.disconnected()
        }
    }

    /// Emits `org.freedesktop.DBus.Properties.PropertiesChanged` for `interface` at `path`.
    public func emitPropertiesChanged(
        path: String, interface: String, changed: [String: DBusValue],
        invalidated: [String] = []
    ) throws {
        try DBusValidation.interface(interface)
        try emitSignal(
            path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            arguments: [.string(interface), .vardict(changed), .strings(invalidated)])
    }

    /// Subscribes to signals matching `rule`.
    ///
    /// Adds the rule on the bus (AddMatch) before returning; received signals are
    /// filtered locally on path, interface, member, arg0 and sender. A well-known sender
    /// is checked against the unique name that owns it at the moment the signal is read,
    /// followed through the bus driver's answers alone (GetNameOwner before this returns,
    /// then NameOwnerChanged): a signal from anyone else is dropped, whether it was
    /// broadcast or addressed to this connection, and so is every signal claiming a name
    /// nobody owns. A rule without a sender accepts signals from any connection. When the
    /// stream terminates (consumer gone or cancelled) the rule is removed (RemoveMatch).
    /// The stream finishes when the connection closes. Keeps the newest
    /// `bufferLimit` unconsumed signals.
    public func signals(matching rule: DBusMatchRule, bufferLimit: Int = 1024) async throws -> AsyncStream<DBusSignal> {
        try rule.validate()
        let ruleString = rule.ruleString
        let id = loop.makeID()
        let (stream, continuation) = AsyncStream<DBusSignal>.makeStream(bufferingPolicy: .bufferingNewest(bufferLimit))
        let loop = self.loop
        continuation.onTermination = { _ in
            guard loop.enqueue(.unsubscribe(id: id)) else { return }
            if let message = try? MessageBuilder.methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "RemoveMatch", arguments: [.string(ruleString)])
            {
                dbus_message_set_no_reply(message.raw, 1)
                loop.send(message)
            }
        }
        guard loop.enqueue(.subscribe(id: id, rule, continuation)) else {
            continuation.finish()
            throw DBusError.disconnected()
        }
        do {
            _ = try await callBus("AddMatch", [.string(ruleString)])
        } catch {
            loop.enqueue(.unsubscribe(id: id))
            continuation.onTermination = nil
            continuation.finish()
            throw error
        }
        return stream
    }

    // MARK: Objects

    /// Exports `object` at `path` (replacing any object there). Invalid paths are ignored with an error log;
    /// use `exportChecked` to get an error.
    public func export(_ object: any DBusObject, at path: String) {
        do { try exportChecked(object, at: path) } catch {
            logger.error("Cannot export object", metadata: ["path": "\(path)", "error": "\(error)"])
        }
    }

    /// Exports `object` at `path`; throws InvalidArgs for an invalid path.
    public func exportChecked(_ object: any DBusObject, at path: String) throws {
        try DBusValidation.path(path)
        loop.objects.set(object, at: path)
    }

    /// Removes the object exported at `path`, if any.
    public func unexport(path: String) {
        loop.objects.set(nil, at: path)
    }
}

extension DBusError {
    /// The error libdbus set in `raw` (freed here), or Failed with `fallback` when it set none.
    init(taking raw: inout CDBus.DBusError, fallback: String) {
        defer { dbus_error_free(&raw) }
        guard dbus_error_is_set(&raw) != 0, let name = raw.name else {
            self = .failed(fallback)
            return
        }
        self.init(name: String(cString: name), message: raw.message.map { String(cString: $0) } ?? fallback)
    }
}
