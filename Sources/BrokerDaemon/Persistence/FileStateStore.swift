import BrokerCore
import FoundationEssentials
import Glibc
import Locking

/// The broker's state in `<dir>/state.json` (`StateFileFormat`, version 2): directory 0700,
/// file 0600.
///
/// A change is written in two steps (`StateStore`'s `save` and `sync`):
///
/// - `save` writes the whole state to a temporary file in the same directory and renames it over
///   `state.json`, without an fsync. The rename is atomic, so after a crash of brokerd the file is
///   the old state or the new one, never a mix, and a restarted brokerd reads the new one. On a
///   power loss right after it, ext4's default `data=ordered` (its `auto_da_alloc` on a rename
///   over an existing file) still keeps the file whole: old or new.
/// - `sync` makes the last save durable: an fsync of the file (its descriptor is kept open from
///   the save) and of the directory (the rename). The broker calls it after announcing the change
///   and before replying.
///
/// A save that would write what the file already holds (only access tokens changed, which are
/// not kept at rest, or nothing did) writes nothing.
public final class FileStateStore: StateStore {
    public let directory: String
    public var path: String { directory + "/state.json" }

    /// What the last load found, for the start-up's log.
    public struct LoadReport: Sendable {
        /// The file's format version.
        public var version: Int
        public var bytes: Int
        public var clients: Int
        /// Access tokens a version 1 file held, not kept (they are no longer stored at rest).
        public var droppedAccessTokens: Int
        /// Reading, parsing and building the state.
        public var duration: Duration

        /// `duration` in milliseconds, to a tenth.
        public var milliseconds: Double {
            let (seconds, attoseconds) = duration.components
            return ((Double(seconds) * 1e3 + Double(attoseconds) / 1e15) * 10).rounded() / 10
        }
    }

    private struct Written {
        /// The persisted part of the state the file holds, when known: a save of the same writes nothing.
        var state: BrokerState?
        /// The file of the last save, still to be fsynced (and the directory with it).
        var unsynced: Int32?
        var report: LoadReport?
    }

    private let written = Locked(Written())

    /// Creates the directory (0700) when missing, refuses one of another user's or one that others
    /// can write, and makes one that others can only read private. Locks it
    /// (`brokerd.lock`, held until the process ends) so that no second brokerd, on this bus or
    /// another, writes the same state. Removes the temporary files of brokerd processes that died
    /// in the middle of a save.
    public convenience init(directory: String) throws(StoreError) {
        try self.init(directory: directory, system: .system)
    }

    /// The same, with the file system calls `system` (tests make them fail).
    init(directory: String, system: SystemCalls) throws(StoreError) {
        self.directory = directory
        self.system = system
        try Self.makeDirectory(directory)
        lockDescriptor = try Self.lock(directory, system: system)
        removeAbandonedTemporaryFiles()
    }

    /// Every call that writes the state goes through these.
    private let system: SystemCalls

    /// The open `brokerd.lock`, whose `flock` this process holds.
    private let lockDescriptor: Int32

    deinit {
        written.withLock { if let fd = $0.unsynced { close(fd) } }
        close(lockDescriptor)
    }

    /// What the last successful `load` found (nil before one, or when there was no file).
    public var loadReport: LoadReport? { written.withLock { $0.report } }

    /// The saved state, or nil when there is none. Throws ``StoreError/unsafe(_:)`` for a file
    /// that is not a regular file of this user's with one name and mode 0600 (or stricter),
    /// ``StoreError/corrupt(_:)`` for one that is not a whole state file, and
    /// ``StoreError/newerFormat(_:)`` for one written by a newer brokerd. A version 1 file is
    /// read (its access tokens dropped) and written as version 2 at the next save.
    public func load() throws -> BrokerState? {
        let start = ContinuousClock.now
        // O_NONBLOCK: a FIFO put in its place must not hang the start; O_NOFOLLOW: nor may a symlink redirect it.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if fd < 0 {
            if errno == ENOENT { return nil }
            if errno == ELOOP { throw StoreError.unsafe("\(path) is a symbolic link, not the broker's own file") }
            throw StoreError.io("cannot open \(path)", errno)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreError.io("cannot stat \(path)", errno) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw StoreError.unsafe("\(path) is not a regular file") }
        // Another name for the same file (a hard link someone made) would be changed with it: its
        // mode, when the file is moved aside and made private.
        guard info.st_nlink == 1 else {
            throw StoreError.unsafe(
                "\(path) has \(info.st_nlink) hard links: another name shares the file, so it is not the broker's own")
        }
        guard info.st_uid == getuid() else {
            throw StoreError.unsafe(
                "\(path) belongs to uid \(info.st_uid), not to this user (uid \(getuid())): someone else wrote it")
        }
        guard info.st_mode & 0o077 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            let risk = info.st_mode & 0o022 != 0 ? "others may change it" : "others may read its tokens"
            throw StoreError.unsafe("\(path) has mode \(mode): \(risk); it must be 0600")
        }
        let bytes: [UInt8]
        do {
            bytes = try FileBytes.read(fd: fd, limit: 64 << 20)
        } catch {
            throw StoreError.io("cannot read \(path)", error.code)
        }
        guard !bytes.isEmpty else {
            throw StoreError.corrupt("\(path) is empty (0 bytes): it was cut short, or is not the broker's")
        }
        let loaded: StateFileFormat.Loaded
        do {
            loaded = try StateFileFormat.decode(bytes)
        } catch {
            switch error {
            case .notJSON:
                throw StoreError.corrupt(
                    "\(path) is not valid JSON (\(bytes.count) bytes): it is damaged or was cut short")
            case .noVersion:
                throw StoreError.corrupt(
                    "\(path) is not a broker state file: it has no format version (\(bytes.count) bytes)")
            case .newer(let version):
                throw StoreError.newerFormat(
                    "\(path) has format \(version); this brokerd reads up to \(StateFileFormat.currentVersion)")
            case .damaged(let why):
                throw StoreError.corrupt("\(path) is damaged: \(why)")
            }
        }
        let report = LoadReport(
            version: loaded.version, bytes: bytes.count, clients: loaded.state.clients.count,
            droppedAccessTokens: loaded.droppedAccessTokens, duration: ContinuousClock.now - start)
        written.withLock {
            // A file in the current format holds exactly this state; an older one is rewritten at the next save.
            $0.state = loaded.version == StateFileFormat.currentVersion ? loaded.state : nil
            $0.report = report
        }
        return loaded.state
    }

    /// Replaces `state.json` atomically with `state` (its persisted part), without an fsync:
    /// ``sync()`` makes it durable. Writes nothing when the file already holds that.
    public func save(_ state: BrokerState) throws {
        let persisted = StateFileFormat.persisted(state)
        if written.withLock({ $0.state == persisted }) { return }
        let bytes = StateFileFormat.encode(persisted)
        // In the same directory, so that the rename is atomic; made afresh (O_EXCL), so that it has
        // this process's owner and mode 0600 whatever an earlier file of that name had.
        let temporary = "\(directory)/\(Self.temporaryPrefix)\(getpid()).tmp"
        unlink(temporary)
        let fd = system.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw StoreError.io("cannot create \(temporary)", errno) }
        var ok = false
        defer {
            if !ok {
                close(fd)
                unlink(temporary)
            }
        }
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { system.write(fd, $0) }
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.io("cannot write \(temporary)", errno)
            }
            offset += n
        }
        guard system.rename(temporary, path) == 0 else {
            throw StoreError.io("cannot rename \(temporary) to \(path)", errno)
        }
        ok = true
        written.withLock {
            // The file an earlier save left unsynced is replaced: this one's sync is the one that counts.
            if let earlier = $0.unsynced { close(earlier) }
            $0.unsynced = fd
            $0.state = persisted
        }
    }

    /// Makes the last ``save(_:)`` durable: fsync of the file, then of the directory (the
    /// rename). Nothing to do when every save is synced already.
    public func sync() throws {
        guard
            let fd = written.withLock({ state -> Int32? in
                defer { state.unsynced = nil }
                return state.unsynced
            })
        else { return }
        let synced = system.fsync(fd) == 0
        let code = errno
        close(fd)
        guard synced else { throw StoreError.io("cannot fsync \(path)", code) }
        let dirFD = system.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        guard dirFD >= 0 else { throw StoreError.io("cannot open \(directory) to fsync it", errno) }
        defer { close(dirFD) }
        guard system.fsync(dirFD) == 0 else { throw StoreError.io("cannot fsync \(directory)", errno) }
    }

    /// Moves an unusable state file aside (never overwrites it silently) and returns where it
    /// went: `state.json.broken-<unix time>`, with a counter when that name is taken, so that an
    /// earlier copy is never replaced. The copy is made 0600 when it is this user's.
    public func quarantine() -> String? {
        let stamp = "\(path).broken-\(time(nil))"
        for attempt in 0..<100 {
            let aside = attempt == 0 ? stamp : "\(stamp)-\(attempt)"
            // link + unlink rather than rename: link never replaces an existing file.
            if link(path, aside) == 0 {
                unlink(path)
            } else if errno == EEXIST {
                continue
            } else {
                // No hard link possible (a file system without them, or a directory): rename,
                // once the name is known to be free.
                if Self.exists(aside) { continue }
                guard rename(path, aside) == 0 else { return nil }
            }
            var info = stat()
            // Not when the file has another name (a hard link): that file's mode is not the broker's to change.
            if lstat(aside, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == getuid(), info.st_nlink == 1 {
                chmod(aside, 0o600)
            }
            syncDirectory()
            return aside
        }
        return nil
    }

    /// The prefix of the temporary files `save` writes (`.state.json.<pid>.tmp`).
    static let temporaryPrefix = ".state.json."

    /// Removes `.state.json.<pid>.tmp` files whose process is gone (killed during a save).
    private func removeAbandonedTemporaryFiles() {
        guard let dir = opendir(directory) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard name.hasPrefix(Self.temporaryPrefix), name.hasSuffix(".tmp"),
                let pid = Int32(name.dropFirst(Self.temporaryPrefix.count).dropLast(4))
            else { continue }
            if pid != getpid(), kill(pid, 0) != 0, errno == ESRCH {
                unlink("\(directory)/\(name)")
            }
        }
    }

    private func syncDirectory() {
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 {
            fsync(dirFD)
            close(dirFD)
        }
    }

    private static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// Takes `<directory>/brokerd.lock` (an exclusive `flock`, released by the kernel when the
    /// process ends, however it ends) and writes this process's id in it, for the message a second
    /// brokerd gives.
    private static func lock(_ directory: String, system: SystemCalls) throws(StoreError) -> Int32 {
        let path = directory + "/brokerd.lock"
        let fd = system.open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        if fd < 0 {
            if errno == ELOOP { throw StoreError.unsafe("\(path) is a symbolic link, not the broker's own file") }
            throw StoreError.io("cannot open \(path)", errno)
        }
        var info = stat()
        // One name only: the pid written below would overwrite whatever file a hard link shares.
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == getuid(), info.st_nlink == 1
        else {
            close(fd)
            throw StoreError.unsafe("\(path) is not a regular file of this user's with one name; remove it")
        }
        guard system.flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = pread(fd, &buffer, buffer.count, 0)
            close(fd)
            guard code == EWOULDBLOCK else { throw StoreError.io("cannot lock \(path)", code) }
            let holder =
                count > 0
                ? Int32(String(decoding: buffer[..<count].prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)) : nil
            throw StoreError.busy(
                "another brokerd\(holder.map { " (pid \($0))" } ?? "") is using the state directory \(directory); "
                    + "stop it first, or give this one another --state-dir"
            )
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }

    private static func makeDirectory(_ directory: String) throws(StoreError) {
        var partial = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            partial += "/" + component
            if mkdir(partial, 0o700) != 0 && errno != EEXIST {
                throw StoreError.io("cannot create \(partial)", errno)
            }
        }
        var info = stat()
        guard stat(directory, &info) == 0 else { throw StoreError.io("cannot stat \(directory)", errno) }
        guard info.st_uid == getuid() else {
            throw StoreError.unsafe("\(directory) belongs to uid \(info.st_uid), not to this user")
        }
        // Others who can write the directory could have put, replaced or linked any file in it:
        // nothing in it can be trusted, and making it 0700 now would hide that.
        if info.st_mode & 0o022 != 0 {
            throw StoreError.unsafe(
                "\(directory) is writable by others (mode \(String(info.st_mode & 0o7777, radix: 8))), so anyone "
                    + "could have put or replaced the files in it; check what it holds (remove what you did not put "
                    + "there), then chmod 700 \(directory); or give brokerd another --state-dir")
        }
        // Readable by others only: nothing in it was changed by them, and its files are 0600.
        if info.st_mode & 0o077 != 0 {
            guard chmod(directory, 0o700) == 0 else { throw StoreError.io("cannot make \(directory) private", errno) }
        }
    }
}

/// Why the state could not be read or written.
public enum StoreError: Error, CustomStringConvertible {
    case io(String, Int32)
    case unsafe(String)
    case corrupt(String)
    case newerFormat(String)
    /// Another brokerd holds the state directory.
    case busy(String)

    public var description: String {
        switch self {
        case .io(let what, let code): return "\(what): \(String(cString: strerror(code)))"
        case .unsafe(let why), .corrupt(let why), .newerFormat(let why), .busy(let why): return why
        }
    }
}
