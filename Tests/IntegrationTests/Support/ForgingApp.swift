import DBus
import TestSupport

/// An app on the bus that owns no name and sends signals claiming to be someone else: the
/// desktop's screensaver or idle monitor, the notification server, brokerd. Each signal is sent
/// broadcast and addressed to every other connection on the bus, which dbus-daemon delivers
/// whatever the receiver's match rules say.
final class ForgingApp: Sendable {
    let connection: DBusConnection

    init(bus: PrivateBus) async throws {
        connection = try await offThePool { try DBusConnection(address: bus.address) }
    }

    deinit { connection.close() }

    /// Sends the signal to everyone, then waits until the bus has routed it (the reply to a call
    /// comes after every message sent before it).
    func forge(path: String, interface: String, member: String, arguments: [DBusValue]) async throws {
        let names =
            try await bus("ListNames").first?.stringArray?.filter {
                $0.hasPrefix(":") && $0 != connection.uniqueName
            } ?? []
        try connection.emitSignal(path: path, interface: interface, member: member, arguments: arguments)
        for name in names {
            try connection.emitSignal(
                path: path, interface: interface, member: member, arguments: arguments, destination: name)
        }
        _ = try await bus("GetId")
    }

    private func bus(_ member: String) async throws -> [DBusValue] {
        try await connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: member)
    }
}
