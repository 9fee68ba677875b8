import DBus
import Glibc
import Logging

/// This login session at logind, on the system bus: where the lock source hears `Lock` and the
/// idle source reads `IdleHint`. The system bus is `DBUS_SYSTEM_BUS_ADDRESS` when set (which
/// is how tests put a stand-in logind on a private bus), else the machine's.
enum LogindSession {
    static let busName = "org.freedesktop.login1"

    /// A connection to the system bus and the session's object path (from `XDG_SESSION_ID`, else
    /// the session of this process); nil where there is none, as in a container. The caller
    /// closes the connection.
    static func find(logger: Logger) async -> (bus: DBusConnection, path: String)? {
        guard let bus = try? DBusConnection.systemBus(logger: logger) else { return nil }
        let manager = LogindManager(bus, destination: busName, path: "/org/freedesktop/login1")
        let path: String?
        do {
            if let id = getenv("XDG_SESSION_ID").map({ String(cString: $0) }), !id.isEmpty {
                path = try await manager.getSession(sessionId: id, timeout: .seconds(5)).objectPath
            } else {
                path = try await manager.getSessionByPID(pid: UInt32(getpid()), timeout: .seconds(5)).objectPath
            }
        } catch {
            // Said at debug: outside a login session (a container, a service) this is expected.
            logger.debug("logind names no session for brokerd", metadata: ["error": "\(error)"])
            path = nil
        }
        guard let path else {
            bus.close()
            return nil
        }
        return (bus, path)
    }
}
