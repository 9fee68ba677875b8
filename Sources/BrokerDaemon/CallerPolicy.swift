import BrokerCore
import BrokerPersistence
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
///
/// The bus names the process that opened the connection, which need not be the code that uses
/// it: a process can hand its socket to another (SCM_RIGHTS, or a descriptor kept across fork
/// or exec), and code loaded into it (LD_PRELOAD) is the process. What can be checked is that
/// the process is still the one whose program was checked: on every call for a bound clientId,
/// and every later call naming no clientId (a sign-in flow's), its start time (a reused pid has
/// another) and its executable's file (exec changes it; replacing the file on disk does not)
/// must be those seen at the lookup. A connection whose process has exited or run another
/// program is refused bound clientIds from then on. libdbus and GDBus open their sockets
/// close-on-exec, so a connection outlives an exec only when someone kept it open on purpose.
final class CallerPolicy: Sendable {
    struct Credentials: Sendable, Equatable {
        var userId: UInt32
        var processId: UInt32?
        /// The caller's executable, resolved from its process id once; nil when unknown.
        var executable: String?
        /// The process behind `processId` when the executable was read; nil when unknown.
        var process: ProcessIdentity? = nil
        /// What the limits count the caller against (``CallerPolicy/app(executable:processId:)``),
        /// read with the executable; nil when unknown.
        var app: String? = nil
    }

    /// One process, as `/proc` shows it: what stays the same for the life of a process, and what
    /// an exec changes.
    struct ProcessIdentity: Sendable, Equatable {
        /// `starttime` of `/proc/PID/stat` (clock ticks after boot): a pid is reused, a pid with
        /// its start time is not.
        var startTime: UInt64
        /// The device and inode `/proc/PID/exe` leads to, even once the file is deleted.
        var executableDevice: UInt64
        var executableInode: UInt64
    }

    /// Asks the bus daemon for a connection's credentials.
    typealias Lookup = @Sendable (String) async throws -> Credentials
    /// Asks the bus daemon whether a connection is still there.
    typealias Presence = @Sendable (String) async -> Bool
    /// What a process is now; nil when it is gone (or cannot be read).
    typealias ProcessProbe = @Sendable (UInt32) -> ProcessIdentity?

    private let ownUserId: UInt32
    /// clientId -> executables allowed to use it (absolute, symlinks resolved).
    private let allowedExecutables: [String: Set<String>]
    private let lookup: Lookup
    private let presence: Presence
    private let probe: ProcessProbe
    private let logger: Logger
    private let known = Locked<[String: Entry]>([:])

    /// What is known of a caller: its credentials, or the one lookup its first calls all wait for.
    private enum Entry {
        case known(Caller)
        case lookingUp(Task<Credentials, any Error>)
    }

    /// A caller whose credentials are known.
    private struct Caller {
        var credentials: Credentials
        /// A bound clientId was served on this connection: later calls naming no clientId (a
        /// flow it started) check the process too.
        var servedBound = false
        /// What happened to the process behind the connection, once seen: it is refused bound
        /// clientIds for good, even should a later look find nothing amiss.
        var changed: String?
    }

    init(
        ownUserId: UInt32 = getuid(), allowedExecutables: [String: Set<String>], logger: Logger,
        presence: @escaping Presence = { _ in true }, probe: @escaping ProcessProbe = CallerPolicy.identity(of:),
        lookup: @escaping Lookup
    ) {
        self.ownUserId = ownUserId
        self.allowedExecutables = allowedExecutables.mapValues { Set($0.map(Self.resolved)) }
        self.logger = logger
        self.presence = presence
        self.probe = probe
        self.lookup = lookup
    }

    /// A policy that asks `connection`'s bus daemon.
    convenience init(connection: DBusConnection, allowedExecutables: [String: Set<String>], logger: Logger) {
        let presence: Presence = { sender in
            // A bus that cannot answer is taken to say yes: the caller's departure still ends its flows.
            (try? await BusDriver(connection).nameHasOwner(sender, timeout: .seconds(5)).value) ?? true
        }
        self.init(allowedExecutables: allowedExecutables, logger: logger, presence: presence) { sender in
            let credentials: [String: DBusValue]
            do {
                credentials = try await BusDriver(connection).getConnectionCredentials(sender, timeout: .seconds(5))
                    .value
            } catch is DesktopServiceMismatch {
                credentials = [:]  // refused below, as a reply without the user
            }
            guard let userId = credentials["UnixUserID"]?.uint32 else {
                throw BrokerFailure(.accessDenied, "the bus did not say which user the caller runs as")
            }
            let processId = credentials["ProcessID"]?.uint32
            guard let processId, let (executable, process) = Self.program(of: processId) else {
                return Credentials(userId: userId, processId: processId, executable: nil)
            }
            return Credentials(
                userId: userId, processId: processId, executable: executable, process: process,
                app: Self.app(executable: executable, processId: processId))
        }
    }

    /// Refuses `sender` with `AccessDenied` unless it runs as the broker's user and, when
    /// `clientId` is bound to executables, runs one of them, in the process that connected.
    func authorize(sender: String, clientId: String?) async throws(BrokerFailure) {
        try check(try await caller(sender), sender: sender, clientId: clientId)
    }

    /// ``authorize(sender:clientId:)`` without waiting: nil when the caller's credentials are
    /// not known yet (its first call), which only the async form can look up.
    func authorizeKnownCaller(sender: String, clientId: String?) -> Result<Void, BrokerFailure>? {
        guard case .known(let caller)? = known.withLock({ $0[sender] }) else { return nil }
        do throws(BrokerFailure) {
            try check(caller, sender: sender, clientId: clientId)
            return .success(())
        } catch {
            return .failure(error)
        }
    }

    private func check(_ caller: Caller, sender: String, clientId: String?) throws(BrokerFailure) {
        let credentials = caller.credentials
        guard credentials.userId == ownUserId else {
            logger.warning(
                "refused a caller of another user", metadata: ["sender": "\(sender)", "uid": "\(credentials.userId)"])
            throw BrokerFailure(
                .accessDenied,
                "the broker serves only user \(ownUserId); this caller runs as user \(credentials.userId)")
        }
        let allowed = clientId.flatMap { allowedExecutables[$0] }
        guard allowed != nil || (clientId == nil && caller.servedBound) else { return }
        if let clientId, let allowed {
            guard let executable = credentials.executable, allowed.contains(executable) else {
                logger.warning(
                    "refused a caller for a bound clientId",
                    metadata: [
                        "sender": "\(sender)", "clientId": "\(clientId)",
                        "executable": "\(credentials.executable ?? "unknown")",
                    ])
                throw BrokerFailure(
                    .accessDenied,
                    "the configuration allows clientId \(clientId) only to "
                        + "\(allowed.sorted().joined(separator: ", ")); this caller is "
                        + "\(credentials.executable.map(OutsideText.escaped) ?? "an unknown program")"
                )
            }
        }
        let change = caller.changed ?? processChange(credentials)
        if let change {
            if caller.changed == nil {
                update(sender) { $0.changed = change }
                logger.warning(
                    "refused a connection whose process exited or ran another program",
                    metadata: [
                        "sender": "\(sender)", "pid": "\(credentials.processId.map(String.init) ?? "unknown")",
                        "clientId": "\(clientId ?? "")", "change": "\(change)",
                    ])
            }
            let program = credentials.executable.map(OutsideText.escaped) ?? "an unknown program"
            throw BrokerFailure(
                .accessDenied,
                "the process that opened this connection (\(program), pid "
                    + "\(credentials.processId.map(String.init) ?? "unknown")) \(change) since the broker checked its "
                    + "program, so whoever uses the connection now is not that program; a clientId bound to programs "
                    + "is served only to the process that connected: connect again")
        }
        if allowed != nil, !caller.servedBound { update(sender) { $0.servedBound = true } }
    }

    /// How the process behind a connection differs from the one its credentials describe; nil
    /// when it is the same process, running the same executable.
    private func processChange(_ credentials: Credentials) -> String? {
        guard let processId = credentials.processId, let then = credentials.process else {
            return "could not be identified"
        }
        guard let now = probe(processId) else { return "has exited" }
        if now.startTime != then.startTime { return "has exited, and its pid is another process's now" }
        if now.executableDevice != then.executableDevice || now.executableInode != then.executableInode {
            return "has run another program (\(Self.executable(of: processId) ?? "unknown"))"
        }
        return nil
    }

    /// Changes what is known of a caller that is still known (not gone, nor looked up again).
    private func update(_ sender: String, _ change: (inout Caller) -> Void) {
        known.withLock { known in
            guard case .known(var caller)? = known[sender] else { return }
            change(&caller)
            known[sender] = .known(caller)
        }
    }

    /// The caller left the bus: its unique name will never come back.
    func forget(_ sender: String) {
        _ = known.withLock { $0.removeValue(forKey: sender) }
    }

    private func caller(_ sender: String) async throws(BrokerFailure) -> Caller {
        let lookup = self.lookup
        let entry: Entry = known.withLock { known in
            if let entry = known[sender] { return entry }
            let task = Task { try await lookup(sender) }
            known[sender] = .lookingUp(task)
            return .lookingUp(task)
        }
        guard case .lookingUp(let task) = entry else {
            if case .known(let caller) = entry { return caller }
            throw BrokerFailure(.accessDenied, "the broker could not learn who the caller is")
        }
        do {
            let found = try await task.value
            return known.withLock { known in
                // Unless the caller left (or failed) meanwhile, which drops the entry.
                if case .lookingUp? = known[sender] { known[sender] = .known(Caller(credentials: found)) }
                if case .known(let caller)? = known[sender] { return caller }
                return Caller(credentials: found)
            }
        } catch {
            // A failed lookup is not remembered: the caller's next call asks again.
            known.withLock { known in
                if case .lookingUp? = known[sender] { known[sender] = nil }
            }
            if let failure = error as? BrokerFailure { throw failure }
            throw BrokerFailure(.accessDenied, "the broker could not learn who the caller is: \(error)")
        }
    }

    /// A process's executable and identity, read so that both belong to one process running one
    /// program: its start time and executable's file before and after the path are the same.
    static func program(of processId: UInt32) -> (String, ProcessIdentity)? {
        guard let before = identity(of: processId), let executable = executable(of: processId),
            let after = identity(of: processId), before == after
        else { return nil }
        return (executable, before)
    }

    /// The process `processId` is now, from `/proc`; nil when it is gone.
    static func identity(of processId: UInt32) -> ProcessIdentity? {
        guard let started = startTime(of: processId) else { return nil }
        var info = stat()
        guard stat("/proc/\(processId)/exe", &info) == 0, startTime(of: processId) == started else { return nil }
        return ProcessIdentity(
            startTime: started, executableDevice: UInt64(info.st_dev), executableInode: UInt64(info.st_ino))
    }

    /// Field 22 of `/proc/PID/stat`, `starttime`. The fields are counted after the last ")", as
    /// the program's name before it may hold spaces and parentheses.
    static func startTime(of processId: UInt32) -> UInt64? {
        guard let bytes = try? FileBytes.read("/proc/\(processId)/stat", limit: 4096),
            let close = bytes.lastIndex(of: UInt8(ascii: ")"))
        else { return nil }
        // After ") ": field 3 (state) onwards, so starttime is the 20th.
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
        guard fields.count >= 20 else { return nil }
        return UInt64(String(decoding: fields[fields.startIndex + 19], as: UTF8.self))
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

/// The core asks the bus, through the policy, whether a caller is still there and which process
/// and program it is (one process's connections share one bound on sign-ins, one program's
/// processes another).
extension CallerPolicy: CallerDirectory {
    func isConnected(_ owner: String) async -> Bool { await presence(owner) }

    func groups(of owner: String) -> CallerGroups {
        guard case .known(let caller)? = known.withLock({ $0[owner] }) else { return CallerGroups() }
        return Self.groups(caller.credentials)
    }

    /// The caller's groups once its credentials are known, waiting for the one lookup its first
    /// calls share; empty when the bus could not say (the call is then refused by ``authorize``).
    func groups(ofCaller sender: String) async -> CallerGroups {
        guard let caller = try? await caller(sender) else { return CallerGroups() }
        return Self.groups(caller.credentials)
    }

    /// An app is its program: the executable the bus's process id leads to. A process whose
    /// executable cannot be read (gone, or made unreadable: a non-dumpable process hides
    /// `/proc/PID/exe`) cannot be told from another such, so they all share one program's bound,
    /// rather than each escaping it.
    private static func groups(_ credentials: Credentials) -> CallerGroups {
        guard let processId = credentials.processId else { return CallerGroups() }
        return CallerGroups(
            process: "process \(processId)",
            program: credentials.app ?? credentials.executable ?? "a program that could not be read")
    }

    /// Programs that run other apps: an interpreter (every Python app's executable is python3),
    /// and Flatpak's bus proxy, through which every sandboxed app without its own bus access
    /// reaches the session bus. One share for all of them would let one app starve the others.
    static let interpreters: Set<String> = [
        "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "gjs", "java", "bash", "sh", "dash",
        "lua", "php", "tclsh", "wish",
    ]

    /// The app an executable and its process stand for: the executable itself; for an
    /// interpreter, with the script or module it runs (`/usr/bin/python3.11 /opt/notes/app.py`);
    /// for Flatpak's `xdg-dbus-proxy`, its process (one proxy serves one app instance).
    static func app(executable: String, processId: UInt32) -> String {
        let name = executable.split(separator: "/").last.map(String.init) ?? executable
        if name == "xdg-dbus-proxy" { return "\(executable), process \(processId)" }
        // python3.11, ruby3.1: the name without its version.
        let bare = String(name.prefix { !$0.isNumber && $0 != "." })
        guard interpreters.contains(bare) || interpreters.contains(name) else { return executable }
        guard let script = script(of: processId) else { return executable }
        return "\(executable) \(script)"
    }

    /// The script or module an interpreter's process runs: its first argument that is not an
    /// option (`-m module` and `-c` kept with their value); nil when /proc does not say.
    static func script(of processId: UInt32) -> String? {
        guard let bytes = try? FileBytes.read("/proc/\(processId)/cmdline", limit: 4096) else { return nil }
        let arguments = bytes.split(separator: 0, omittingEmptySubsequences: false).dropFirst().map {
            String(decoding: $0, as: UTF8.self)
        }
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let argument = arguments[index]
            if argument == "-m" || argument == "-c" || argument == "-jar" {
                return arguments.indices.contains(index + 1) ? argument + " " + arguments[index + 1] : argument
            }
            if !argument.hasPrefix("-") { return argument.isEmpty ? nil : argument }
            index += 1
        }
        return nil
    }
}
