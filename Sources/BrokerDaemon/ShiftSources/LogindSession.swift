import DBus
import Glibc
import Logging

/// This login session at logind, on the system bus: where the lock source hears `Lock` and the
/// idle source reads `IdleHint`. The system bus is `DBUS_SYSTEM_BUS_ADDRESS` when set (which
/// is how tests put a stand-in logind on a private bus), else the machine's.
enum LogindSession {
    static let busName = "org.freedesktop.login1"
    static let sessionInterface = "org.freedesktop.login1.Session"

    /// A connection to the system bus and the session's object path (from `XDG_SESSION_ID`, else
    /// the session of this process); nil where there is none, as in a container. The caller
    /// closes the connection.
    static func find(logger: Logger) async -> (bus: DBusConnection, path: String)? {
        guard let bus = try? DBusConnection.systemBus(logger: logger) else { return nil }
        let manager = (path: "/org/freedesktop/login1", interface: "org.freedesktop.login1.Manager")
        let reply: [DBusValue]?
        do {
            if let id = getenv("XDG_SESSION_ID").map({ String(cString: $0) }), !id.isEmpty {
                reply = try await bus.call(
                    destination: busName, path: manager.path, interface: manager.interface,
                    member: "GetSession", arguments: [.string(id)], timeout: .seconds(5))
            } else {
                reply = try await bus.call(
                    destination: busName, path: manager.path, interface: manager.interface,
                    member: "GetSessionByPID", arguments: [.uint32(UInt32(getpid()))], timeout: .seconds(5))
            }
        } catch {
            // Said at debug: outside a login session (a container, a service) this is expected.
            logger.debug("logind names no session for brokerd", metadata: ["error": "\(error)"])
            reply = nil
        }
        guard let path = reply?.first?.objectPath else {
            bus.close()
            return nil
        }
        return (bus, path)
    }
}
