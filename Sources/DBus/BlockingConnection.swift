import CDBus

/// A private connection to a bus without a thread of its own: each call is sent and its reply
/// awaited on the calling thread (libdbus's `dbus_connection_send_with_reply_and_block`).
///
/// For a program that asks a question or two and exits (a command-line query): it starts no
/// thread and needs no Swift concurrency, which is most of the cost of such a run. It receives
/// nothing but replies (no signals, no exported objects): anything longer-lived uses a
/// `DBusConnection`. Not `Sendable`: one thread owns it, and the connection closes when it goes.
public final class DBusBlockingConnection {
    private let connection: OpaquePointer
    /// The unique bus name assigned by the bus (e.g. `:1.42`).
    public let uniqueName: String

    /// Opens a private connection to the bus at `address` and registers with it (Hello).
    /// Throws like `DBusConnection.init(address:)`.
    public init(address: String) throws(DBusError) {
        (connection, uniqueName) = try DBusConnection.openPrivate(address: address)
    }

    deinit {
        dbus_connection_close(connection)
        dbus_connection_unref(connection)
    }

    /// Calls a method and waits on this thread for the reply's arguments.
    ///
    /// Throws `DBusError` as `DBusConnection.call` does: error replies keep their name and
    /// message; InvalidArgs for invalid names or values (nothing is sent); NoReply when `timeout`
    /// passes; Disconnected when the bus drops the connection.
    public func call(
        destination: String, path: String, interface: String, member: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) throws(DBusError) -> [DBusValue] {
        let message = try MessageBuilder.methodCall(
            destination: destination, path: path,
            interface: interface.isEmpty ? nil : interface,
            member: member, arguments: arguments)
        defer { message.release() }
        let milliseconds = Int32(clamping: (timeout.clampedNanoseconds + 999_999) / 1_000_000)
        var err = CDBus.DBusError()
        dbus_error_init(&err)
        guard let reply = dbus_connection_send_with_reply_and_block(connection, message.raw, milliseconds, &err) else {
            throw DBusError(taking: &err, fallback: "The call to \(member) failed")
        }
        defer { dbus_message_unref(reply) }
        return try DBusCodec.decodeArguments(reply)
    }
}
