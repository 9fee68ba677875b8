import CDBus
import Foundation
import TestSupport

// MARK: - A client that writes what libdbus would not

/// Sends one method call whose string argument holds exactly `stringBytes`, bypassing libdbus's
/// checks: the message is built by libdbus around a placeholder of the same length, marshalled,
/// patched, and written to the connection's socket directly.
enum RawBusClient {
    enum Outcome: Equatable, CustomStringConvertible {
        /// The bus daemon closed the connection without a reply.
        case droppedByBus
        case answer
        case error(String)
        case noReplyInTime

        var description: String {
            switch self {
            case .droppedByBus: return "the bus dropped the sender"
            case .answer: return "answered"
            case .error(let name): return "error \(name)"
            case .noReplyInTime: return "no reply within 5 s"
            }
        }
    }

    /// Blocking; run it off Swift's shared pool.
    static func call(address: String, member: String, stringBytes: [UInt8]) throws -> Outcome {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let connection = dbus_connection_open_private(address, &error) else {
            throw ProcessFailure("cannot connect to \(address)")
        }
        defer {
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
        }
        dbus_connection_set_exit_on_disconnect(connection, 0)
        guard dbus_bus_register(connection, &error) != 0 else {
            throw ProcessFailure("cannot register with \(address)")
        }

        let placeholder = [UInt8](repeating: UInt8(ascii: "Q"), count: stringBytes.count)
        guard let message = dbus_message_new_method_call(Fuzz.service, Fuzz.path, Fuzz.interface, member) else {
            throw ProcessFailure("out of memory")
        }
        defer { dbus_message_unref(message) }
        var iterator = DBusMessageIter()
        dbus_message_iter_init_append(message, &iterator)
        let appended = String(decoding: placeholder, as: UTF8.self).withCString {
            cdbus_iter_append_string(&iterator, $0)
        }
        guard appended != 0 else { throw ProcessFailure("cannot append the placeholder") }
        let serial: UInt32 = 4242
        dbus_message_set_serial(message, serial)
        var buffer: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        guard dbus_message_marshal(message, &buffer, &length) != 0, let buffer else {
            throw ProcessFailure("cannot marshal")
        }
        var wire = [UInt8](UnsafeRawBufferPointer(start: buffer, count: Int(length)))
        dbus_free(buffer)
        // The string is the body's last bytes but its terminating NUL.
        let start = wire.count - 1 - placeholder.count
        guard start > 0, Array(wire[start..<(wire.count - 1)]) == placeholder else {
            throw ProcessFailure("placeholder not found")
        }
        wire.replaceSubrange(start..<(wire.count - 1), with: stringBytes)

        var socket: Int32 = -1
        guard dbus_connection_get_socket(connection, &socket) != 0, socket >= 0 else {
            throw ProcessFailure("no socket")
        }
        let written = wire.withUnsafeBytes { Glibc.write(socket, $0.baseAddress, $0.count) }
        guard written == wire.count else { throw ProcessFailure("short write: \(written) of \(wire.count)") }

        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            _ = dbus_connection_read_write(connection, 100)
            while let incoming = dbus_connection_pop_message(connection) {
                defer { dbus_message_unref(incoming) }
                guard dbus_message_get_reply_serial(incoming) == serial else { continue }
                if dbus_message_get_type(incoming) == DBUS_MESSAGE_TYPE_ERROR {
                    return .error(dbus_message_get_error_name(incoming).map { String(cString: $0) } ?? "?")
                }
                return .answer
            }
            if dbus_connection_get_is_connected(connection) == 0 { return .droppedByBus }
        }
        return .noReplyInTime
    }
}
