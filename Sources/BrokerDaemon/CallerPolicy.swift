import BrokerCore
import DBus
import Glibc
import Locking
import Logging

/// Who may call: the bus daemon's word on each caller (`GetConnectionCredentials`), never the
/// caller's own. Callers of another user are always refused; a clientId the configuration binds
/// to executables may be used only by processes running one of them (`/proc/PID/exe`).
///
/// A session bus normally admits only its user, so the user check is a second lock for buses
/// configured otherwise. Credentials are looked up once per connection (unique names are never
/// reused on a bus) and forgotten when the connection leaves.
final class CallerPolicy: Sendable {
    struct Credentials: Sendable, Equatable {
        var userId: UInt32
        var processId: UInt32?
        /// The caller's executable, resolved from its process id once; nil when unknown.
        var executable: String?
    }

    /// Asks the bus daemon for a connection's credentials.
    typealias Lookup = @Sendable (String) async throws -> Credentials

    private let ownUserId: UInt32
    /// clientId -> executables allowed to use it (absolute, symlinks resolved).
    private let allowedExecutables: [String: Set<String>]
    private let lookup: Lookup
    private let logger: Logger
    private let known = Locked<[String: Entry]>([:])

    /// What is known of a caller: its credentials, or the one lookup its first calls all wait for.
    private enum Entry {
        case known(Credentials)
        case lookingUp(Task<Credentials, any Error>)
    }

    init(
        ownUserId: UInt32 = getuid(), allowedExecutables: [String: Set<String>], logger: Logger,
        lookup: @escaping Lookup
    ) {
        self.ownUserId = ownUserId
        self.allowedExecutables = allowedExecutables.mapValues { Set($0.map(Self.resolved)) }
        self.logger = logger
        self.lookup = lookup
    }

    /// A policy that asks `connection`'s bus daemon.
    convenience init(connection: DBusConnection, allowedExecutables: [String: Set<String>], logger: Logger) {
        self.init(allowedExecutables: allowedExecutables, logger: logger) { sender in
            let reply = try await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetConnectionCredentials", arguments: [.string(sender)], timeout: .seconds(5))
            guard let credentials = reply.first?.vardict, let userId = credentials["UnixUserID"]?.uint32 else {
                throw BrokerFailure(.accessDenied, "the bus did not say which user the caller runs as")
            }
            let processId = credentials["ProcessID"]?.uint32
            return Credentials(
                userId: userId, processId: processId, executable: processId.flatMap(Self.executable(of:)))
        }
    }

    /// Refuses `sender` with `AccessDenied` unless it runs as the broker's user and, when
    /// `clientId` is bound to executables, runs one of them.
    func authorize(sender: String, clientId: String?) async throws(BrokerFailure) {
        try check(try await credentials(of: sender), sender: sender, clientId: clientId)
    }

    /// ``authorize(sender:clientId:)`` without waiting: nil when the caller's credentials are
    /// not known yet (its first call), which only the async form can look up.
    func authorizeKnownCaller(sender: String, clientId: String?) -> Result<Void, BrokerFailure>? {
        guard case .known(let credentials)? = known.withLock({ $0[sender] }) else { return nil }
        do throws(BrokerFailure) {
            try check(credentials, sender: sender, clientId: clientId)
            return .success(())
        } catch {
            return .failure(error)
        }
    }

    private func check(_ credentials: Credentials, sender: String, clientId: String?) throws(BrokerFailure) {
        guard credentials.userId == ownUserId else {
            logger.warning(
                "refused a caller of another user", metadata: ["sender": "\(sender)", "uid": "\(credentials.userId)"])
            throw BrokerFailure(
                .accessDenied,
                "the broker serves only user \(ownUserId); this caller runs as user \(credentials.userId)")
        }
        guard let clientId, let allowed = allowedExecutables[clientId] else { return }
        guard let executable = credentials.executable, allowed.contains(executable) else {
            logger.warning(
                "refused a caller for a bound clientId",
                metadata: [
                    "sender": "\(sender)", "clientId": "\(clientId)",
                    "executable": "\(credentials.executable ?? "unknown")",
                ])
            throw BrokerFailure(
                .accessDenied,
                "the configuration allows clientId \(clientId) only to \(allowed.sorted().joined(separator: ", ")); "
                    + "this caller is \(credentials.executable.map(OutsideText.escaped) ?? "an unknown program")"
            )
        }
    }

    /// The caller left the bus: its unique name will never come back.
    func forget(_ sender: String) {
        _ = known.withLock { $0.removeValue(forKey: sender) }
    }

    private func credentials(of sender: String) async throws(BrokerFailure) -> Credentials {
        let lookup = self.lookup
        let entry: Entry = known.withLock { known in
            if let entry = known[sender] { return entry }
            let task = Task { try await lookup(sender) }
            known[sender] = .lookingUp(task)
            return .lookingUp(task)
        }
        guard case .lookingUp(let task) = entry else {
            if case .known(let credentials) = entry { return credentials }
            throw BrokerFailure(.accessDenied, "the broker could not learn who the caller is")
        }
        do {
            let found = try await task.value
            known.withLock { known in
                // Unless the caller left (or failed) meanwhile, which drops the entry.
                if case .lookingUp? = known[sender] { known[sender] = .known(found) }
            }
            return found
        } catch {
            // A failed lookup is not remembered: the caller's next call asks again.
            known.withLock { known in
                if case .lookingUp? = known[sender] { known[sender] = nil }
            }
            if let failure = error as? BrokerFailure { throw failure }
            throw BrokerFailure(.accessDenied, "the broker could not learn who the caller is: \(error)")
        }
    }

    /// `/proc/PID/exe`, the executable the kernel started (a deleted file keeps its " (deleted)" mark).
    static func executable(of processId: UInt32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/\(processId)/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A configured path with symlinks resolved, as `/proc/PID/exe` shows it.
    static func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return path }
        defer { free(real) }
        return String(cString: real)
    }
}
