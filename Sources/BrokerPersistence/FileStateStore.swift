import BrokerCore
import FoundationEssentials
import Glibc
import Locking

/// The broker's state in `<dir>/state.json` (`StateFileFormat`, version 2) and the changes made
/// since in `<dir>/state.journal` (`StateJournal`): directory 0700, files 0600.
///
/// A change is written in two steps (`StateStore`'s `save` and `sync`):
///
/// - `save` appends one line to the journal, the size of what changed (a client's record, the
///   device's account), without an fsync. An append of one `write` is whole after a crash of
///   brokerd; after a power loss the last line may be cut short, and is dropped when read. When
///   the journal has grown to the size of the state file (at least 64 KiB), `save` writes a new
///   snapshot instead: the whole state to a temporary file renamed over `state.json`, naming a
///   new journal (a random id). That journal is written with the first line after the snapshot,
///   header and line in a temporary file renamed over `state.journal`; until then the journal on
///   disk names an earlier snapshot and is ignored (its changes are in the snapshot). So a change
///   costs the bytes of the change, the whole file only once every file's worth of changes, and a
///   snapshot one file.
/// - `sync` makes the last save durable: an fsync of what it wrote (its descriptors are kept
///   open) and, after a snapshot, the removal of the journal it replaced and an fsync of the
///   directory (the renames, the removal). The broker calls it after announcing the change and
///   before replying.
///
/// A change that takes a secret out of the state for good, held nowhere in it any more (a
/// revocation owed that the provider could not make, a token the provider rejected, a replaced
/// device secret; a sign-out moves its refresh tokens and device secrets to the revocations
/// owed), is a line like any other, one `write` before the apps hear of it; the `sync` that
/// follows writes a snapshot, so that the secret leaves the files too rather than stay in the old
/// snapshot or an earlier line. A start that finds such a line after the snapshot (a crash came
/// between the two) writes the snapshot at once. A refresh token the provider revoked (`save`'s
/// `revoked`) grants nothing any more: it stays in the files until the next snapshot, or the next
/// start.
///
/// A save that would write what the files already hold (only access tokens changed, which are
/// not kept at rest, or nothing did) writes nothing. A restart goes on appending to a whole
/// journal of its snapshot; after one cut short or missing, and after a failed write or flush,
/// the next save is a snapshot. A clean stop (``compact()``) writes one too, so that an older
/// brokerd, which reads only `state.json`, finds everything there.
public final class FileStateStore: StateStore {
    public let directory: String
    public var path: String { directory + "/state.json" }
    public var journalPath: String { directory + "/state.journal" }

    /// What the last load found, for the start-up's log.
    public struct LoadReport: Sendable {
        /// The file's format version.
        public var version: Int
        public var bytes: Int
        public var clients: Int
        /// Access tokens a version 1 file held, not kept (they are no longer stored at rest).
        public var droppedAccessTokens: Int
        /// Changes replayed from the journal, and its size.
        public var journalLines = 0
        public var journalBytes = 0
        /// Reading, parsing and building the state.
        public var duration: Duration
        /// Why the snapshot that takes out a secret a replayed line removed (a crash came before
        /// it, or it was a revoked refresh token's, which waits for one) could not be written at
        /// the start; nil when there was none to write or it was.
        public var purgeFailure: String?

        /// `duration` in milliseconds, to a tenth.
        public var milliseconds: Double {
            let (seconds, attoseconds) = duration.components
            return ((Double(seconds) * 1e3 + Double(attoseconds) / 1e15) * 10).rounded() / 10
        }
    }

    /// What the files hold of the state, and what the next ``sync()`` owes the disk. It changes
    /// only through its transitions (below the store), one per thing that happened on disk.
    fileprivate struct Written {
        /// What the journal on disk is to the snapshot, and so what the next save writes.
        enum Journal {
            /// No line can follow what the files hold (nothing read yet, an older format or a
            /// journal cut short was read, a write, rename or flush failed, or the snapshot that
            /// takes a secret out did): the next save, and a clean stop, write a snapshot. `open`:
            /// the journal still open, whose lines the next sync flushes all the same.
            case snapshotOwed(open: Int32?)
            /// The snapshot names journal `id`, not on disk yet: its first line creates it (so that
            /// a snapshot writes one file, and a journal exists only with lines).
            case firstLineOwed(id: String)
            /// The snapshot's journal, open for appending, `bytes` long: a change is a line.
            case appending(Int32, bytes: Int)
        }

        /// What the next ``sync()`` owes the disk.
        struct Owed {
            /// The snapshot of the last save, still to be fsynced (with the journal and the directory).
            var snapshotFlush: Int32?
            /// Lines appended since the journal's last fsync.
            var journalFlush = false
            /// Renames (and a removal) not yet made durable by an fsync of the directory.
            var directoryFlush = false
            /// `state.journal` is an earlier snapshot's, to be removed once the snapshot is on disk.
            var staleJournalRemoval = false
            /// A line took a secret out of the state that the files still hold: a snapshot first.
            var secretPurge = false
        }

        /// The state the files hold, when known: a save of the same writes nothing, and a save of
        /// another state appends the difference.
        private(set) var state: BrokerState?
        /// The account keys the files use.
        private(set) var keys = StateFileFormat.AccountKeys()
        private(set) var journal = Journal.snapshotOwed(open: nil)
        private(set) var snapshotBytes = 0
        fileprivate(set) var owed = Owed()
        var report: LoadReport?
    }

    private let written = Locked(Written())

    /// The journal is replaced by a snapshot once it is this large, or as large as the snapshot.
    static let minimumCompactionBytes = 64 << 10

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
        written.withLock {
            if let fd = $0.owed.snapshotFlush { close(fd) }
            if let fd = $0.journal.open { close(fd) }
        }
        close(lockDescriptor)
    }

    /// What the last successful `load` found (nil before one, or when there was no file).
    public var loadReport: LoadReport? { written.withLock { $0.report } }

    /// The saved state, or nil when there is none. Throws ``StoreError/unsafe(_:)`` for a file
    /// that is not a regular file of this user's with one name and mode 0600 (or stricter),
    /// ``StoreError/corrupt(_:)`` for one that is not a whole state file or journal, and
    /// ``StoreError/newerFormat(_:)`` for one written by a newer brokerd. A version 1 file is
    /// read (its access tokens dropped) and written as version 2 at the next save.
    public func load() throws -> BrokerState? {
        let start = ContinuousClock.now
        guard let bytes = try Self.readOwnFile(path) else { return nil }
        guard !bytes.isEmpty else {
            throw StoreError.corrupt("\(path) is empty (0 bytes): it was cut short, or is not the broker's")
        }
        var loaded: StateFileFormat.Loaded
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
        var replayed = StateJournal.Replayed()
        var journalBytes = 0
        if let snapshot = loaded.journal, let journal = try Self.readOwnFile(journalPath) {
            journalBytes = journal.count
            do {
                replayed = try StateJournal.replay(
                    journal, snapshot: snapshot, onto: &loaded.state, table: &loaded.accounts)
            } catch {
                if case .damaged(let why) = error { throw StoreError.corrupt("\(journalPath) is damaged: \(why)") }
                throw StoreError.corrupt("\(journalPath) is damaged")
            }
        }
        let report = LoadReport(
            version: loaded.version, bytes: bytes.count, clients: loaded.state.clients.count,
            droppedAccessTokens: loaded.droppedAccessTokens, journalLines: replayed.lines, journalBytes: journalBytes,
            duration: ContinuousClock.now - start)
        let state = loaded.state
        // A current file whose journal is its own and whole goes on taking lines; otherwise (an
        // older format, a journal cut short, one of an earlier snapshot, or none) the next save,
        // or the clean stop, writes a snapshot.
        var journal = Written.Journal.snapshotOwed(open: nil)
        if loaded.version == StateFileFormat.currentVersion, let snapshot = loaded.journal {
            if journalBytes == 0 || replayed.stale {
                // No line since the snapshot: the first one starts its journal. A journal of an
                // earlier snapshot (a crash cut off its removal) may hold what that snapshot took
                // off the disk, a secret held nowhere any more: it goes now.
                if replayed.stale {
                    unlink(journalPath)
                    syncDirectory()
                }
                journal = .firstLineOwed(id: snapshot)
            } else if replayed.tornBytes == 0 {
                // Not open (out of descriptors, say): the next save writes a snapshot instead.
                let fd = system.open(journalPath, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0)
                if fd >= 0 { journal = .appending(fd, bytes: journalBytes) }
            }
        }
        written.withLock {
            $0.read(
                state, keys: StateFileFormat.AccountKeys(table: loaded.accounts), journal: journal,
                snapshotBytes: bytes.count, secretToPurge: replayed.removedSecret)
            $0.report = report
        }
        // A line took a secret out for good (a settled revocation) and no snapshot followed it: a
        // crash came first, or it was a revoked refresh token's, which waits for the next one. The
        // secret goes from the files now, before anything else. Should that fail, the next save
        // writes the snapshot.
        if replayed.removedSecret {
            do {
                try sync()
            } catch StoreError.notPurged(_, let why) {
                written.withLock { $0.report?.purgeFailure = why }
            } catch {
                // The snapshot is in place; only its flush failed, which the next sync repeats.
            }
        }
        return state
    }

    /// Writes the change to `state` (its persisted part), without an fsync: ``sync()`` makes it
    /// durable. Writes nothing when the files already hold that. `revoked`: refresh tokens the
    /// change removes that the provider revoked, which need no snapshot of their own to leave the
    /// files.
    public func save(_ state: BrokerState, revoked: Set<String>) throws {
        try written.withLock { (written: inout Written) throws in
            guard let old = written.state else { return try writeSnapshot(state, into: &written) }
            if case .snapshotOwed = written.journal { return try writeSnapshot(state, into: &written) }
            var keys = written.keys
            guard
                case .line(let line, let removesSecret) = StateJournal.change(
                    from: old, to: state, revoked: revoked, keys: &keys)
            else { return }
            switch written.journal {
            case .snapshotOwed:
                try writeSnapshot(state, into: &written)
            case .firstLineOwed(let id):
                // Starting a journal costs a rename, as a snapshot does, which also takes the
                // secret off the disk at once.
                if removesSecret { return try writeSnapshot(state, into: &written) }
                try startJournal(id, with: line, state: state, keys: keys, into: &written)
            case .appending(let journal, let bytes):
                guard bytes < max(Self.minimumCompactionBytes, written.snapshotBytes) else {
                    return try writeSnapshot(state, into: &written)
                }
                do {
                    try writeAll(line, to: journal, naming: journalPath)
                } catch {
                    // Part of the line may be there: the journal is not appended to again, the
                    // next save writes a snapshot (and a new journal) over it.
                    written.journalFailed()
                    throw error
                }
                // The line is what apps are told of; the snapshot that takes the secret out of
                // the files waits for the sync, which the broker runs after telling them.
                written.appended(line.count, state: state, keys: keys, removingSecret: removesSecret)
            }
        }
    }

    /// Makes the last ``save(_:revoked:)`` durable: fsync of the journal, and after a snapshot the removal
    /// of the journal it replaced and fsyncs of the snapshot and the directory (the renames, the
    /// removal). After a line that took a secret out, a snapshot first (until one is written, a
    /// sync tries again). Nothing else to do when every save is synced already.
    public func sync() throws {
        try written.withLock { (written: inout Written) throws in
            // A snapshot that cannot be written leaves the line, which holds the change: it is
            // made durable below all the same, and the next save is a snapshot.
            var purgeFailure: String?
            if written.owed.secretPurge, let state = written.state {
                do {
                    try writeSnapshot(state, into: &written)
                } catch {
                    written.owesSnapshot()
                    purgeFailure = "\(error)"
                }
            }
            do {
                try makeDurable(&written)
            } catch {
                // Both said: the secret left on disk is the one an administrator must hear of.
                if let purgeFailure { throw StoreError.notPurged(directory, "\(purgeFailure); and \(error)") }
                throw error
            }
            if let purgeFailure { throw StoreError.notPurged(directory, purgeFailure) }
        }
    }

    /// The fsyncs (and the removal of a replaced journal) of ``sync()``.
    private func makeDurable(_ written: inout Written) throws {
        // The replaced journal may hold a secret the snapshot took out. It goes once the snapshot's
        // bytes are on the disk (a power loss must not find neither), and whatever fails (the
        // defer), so that no failure leaves it behind.
        func removeStaleJournal() {
            guard written.owed.staleJournalRemoval else { return }
            unlink(journalPath)
            written.owed.staleJournalRemoval = false
        }
        defer { removeStaleJournal() }
        if let snapshot = written.owed.snapshotFlush {
            written.owed.snapshotFlush = nil
            let synced = system.fsync(snapshot) == 0
            let code = errno
            close(snapshot)
            removeStaleJournal()
            guard synced else {
                // A failed fsync is not retried (Linux may report success the second time
                // without the data): the next save writes everything again.
                written.owesSnapshot()
                throw StoreError.io("cannot fsync \(path)", code)
            }
        }
        if written.owed.journalFlush, let journal = written.journal.open {
            guard system.fsync(journal) == 0 else {
                let code = errno
                written.journalFailed()
                throw StoreError.io("cannot fsync \(journalPath)", code)
            }
            written.owed.journalFlush = false
        }
        if written.owed.directoryFlush {
            let dirFD = system.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
            guard dirFD >= 0 else { throw StoreError.io("cannot open \(directory) to fsync it", errno) }
            defer { close(dirFD) }
            guard system.fsync(dirFD) == 0 else { throw StoreError.io("cannot fsync \(directory)", errno) }
            written.owed.directoryFlush = false
        }
    }

    /// Folds the journal into a new snapshot, durably, when it holds any change: at a clean stop,
    /// so that `state.json` alone holds the state.
    public func compact() throws {
        try written.withLock { (written: inout Written) throws in
            guard let state = written.state else { return }
            if case .firstLineOwed = written.journal { return }
            try writeSnapshot(state, into: &written)
        }
        try sync()
    }

    /// Writes `state` whole: a snapshot naming a new journal, to a temporary file renamed into
    /// place. The journal itself comes with the first line after it (``startJournal``): until
    /// then the journal on disk, if any, names an earlier snapshot and is ignored.
    private func writeSnapshot(_ state: BrokerState, into written: inout Written) throws {
        let id = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let (bytes, keys) = StateFileFormat.encode(state, journal: id)
        let snapshot = try writeTemporary(bytes, named: "json")
        guard system.rename(snapshot.path, path) == 0 else {
            let code = errno
            close(snapshot.fd)
            unlink(snapshot.path)
            throw StoreError.io("cannot rename \(snapshot.path) to \(path)", code)
        }
        written.snapshotWritten(state, keys: keys, bytes: bytes.count, unsynced: snapshot.fd, naming: id)
    }

    /// The journal `id` the snapshot names, with its first line: a temporary file renamed over
    /// the journal of an earlier snapshot (ignored since that snapshot was replaced), so that the
    /// journal on disk is never one that names this snapshot but lacks a line it was given.
    private func startJournal(
        _ id: String, with line: [UInt8], state: BrokerState, keys: StateFileFormat.AccountKeys,
        into written: inout Written
    ) throws {
        let bytes = StateJournal.header(snapshot: id) + line
        let journal = try writeTemporary(bytes, named: "journal")
        guard system.rename(journal.path, journalPath) == 0 else {
            let code = errno
            close(journal.fd)
            unlink(journal.path)
            // The line is not written; a snapshot will hold it.
            written.owesSnapshot()
            throw StoreError.io("cannot rename \(journal.path) to \(journalPath)", code)
        }
        written.journalStarted(journal.fd, bytes: bytes.count, state: state, keys: keys)
    }

    /// `bytes` in a new file of this directory (mode 0600, made afresh so that it has this
    /// process's owner whatever an earlier file of that name had), not yet synced; the journal's
    /// open for appending.
    private func writeTemporary(_ bytes: [UInt8], named kind: String) throws -> (path: String, fd: Int32) {
        // In the same directory, so that the rename is atomic.
        let temporary = "\(directory)/.state.\(kind).\(getpid()).tmp"
        let append = kind == "journal" ? O_APPEND : 0
        let flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | append
        var fd = system.open(temporary, flags, 0o600)
        if fd < 0, errno == EEXIST {
            // Left by a failed save of this process (or a process of this pid before a reboot):
            // removed only then, so that a save costs no extra call.
            unlink(temporary)
            fd = system.open(temporary, flags, 0o600)
        }
        guard fd >= 0 else { throw StoreError.io("cannot create \(temporary)", errno) }
        do {
            try writeAll(bytes, to: fd, naming: temporary)
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        return (temporary, fd)
    }

    private func writeAll(_ bytes: [UInt8], to fd: Int32, naming file: String) throws(StoreError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { system.write(fd, $0) }
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.io("cannot write \(file)", errno)
            }
            offset += n
        }
    }

    /// The bytes of `file`, or nil when there is none; refused unless it is a regular file of this
    /// user's, with one name, that others can neither read nor write.
    private static func readOwnFile(_ file: String) throws -> [UInt8]? {
        // O_NONBLOCK: a FIFO put in its place must not hang the start; O_NOFOLLOW: nor may a symlink redirect it.
        let fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if fd < 0 {
            if errno == ENOENT { return nil }
            if errno == ELOOP { throw StoreError.unsafe("\(file) is a symbolic link, not the broker's own file") }
            throw StoreError.io("cannot open \(file)", errno)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreError.io("cannot stat \(file)", errno) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw StoreError.unsafe("\(file) is not a regular file") }
        // Another name for the same file (a hard link someone made) would be changed with it: its
        // mode, when the file is moved aside and made private.
        guard info.st_nlink == 1 else {
            throw StoreError.unsafe(
                "\(file) has \(info.st_nlink) hard links: another name shares the file, so it is not the broker's own")
        }
        guard info.st_uid == getuid() else {
            throw StoreError.unsafe(
                "\(file) belongs to uid \(info.st_uid), not to this user (uid \(getuid())): someone else wrote it")
        }
        guard info.st_mode & 0o077 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            let risk = info.st_mode & 0o022 != 0 ? "others may change it" : "others may read its tokens"
            throw StoreError.unsafe("\(file) has mode \(mode): \(risk); it must be 0600")
        }
        do {
            return try FileBytes.read(fd: fd, limit: 64 << 20)
        } catch {
            throw StoreError.io("cannot read \(file)", error.code)
        }
    }

    /// Moves an unusable state file aside (never overwrites it silently) and returns where it
    /// went: `state.json.broken-<unix time>`, with a counter when that name is taken, so that an
    /// earlier copy is never replaced. Its journal goes aside with it (`state.journal.broken-…`).
    /// The copies are made 0600 when they are this user's.
    public func quarantine() -> String? {
        if Self.exists(journalPath) { _ = Self.moveAside(journalPath) }
        let aside = Self.moveAside(path)
        syncDirectory()
        return aside
    }

    private static func moveAside(_ file: String) -> String? {
        let stamp = "\(file).broken-\(time(nil))"
        for attempt in 0..<100 {
            let aside = attempt == 0 ? stamp : "\(stamp)-\(attempt)"
            // link + unlink rather than rename: link never replaces an existing file.
            if link(file, aside) == 0 {
                unlink(file)
            } else if errno == EEXIST {
                continue
            } else {
                // No hard link possible (a file system without them, or a directory): rename,
                // once the name is known to be free.
                if exists(aside) { continue }
                guard rename(file, aside) == 0 else { return nil }
            }
            var info = stat()
            // Not when the file has another name (a hard link): that file's mode is not the broker's to change.
            if lstat(aside, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == getuid(), info.st_nlink == 1 {
                chmod(aside, 0o600)
            }
            return aside
        }
        return nil
    }

    /// The prefixes of the temporary files a snapshot writes (`.state.json.<pid>.tmp`,
    /// `.state.journal.<pid>.tmp`).
    static let temporaryPrefixes = [".state.json.", ".state.journal."]

    /// Removes the temporary files of processes that are gone (killed during a snapshot).
    private func removeAbandonedTemporaryFiles() {
        guard let dir = opendir(directory) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let prefix = Self.temporaryPrefixes.first(where: { name.hasPrefix($0) }), name.hasSuffix(".tmp"),
                let pid = Int32(name.dropFirst(prefix.count).dropLast(4))
            else { continue }
            if pid != getpid(), kill(pid, 0) != 0, errno == ESRCH {
                unlink("\(directory)/\(name)")
            }
        }
    }

    private func syncDirectory() {
        let dirFD = system.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        if dirFD >= 0 {
            _ = system.fsync(dirFD)
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

/// The transitions of what the files hold: each says what happened on disk, and is the one place
/// that changes the state it names.
extension FileStateStore.Written {
    /// A load read `state` from a snapshot of `snapshotBytes` and its journal, which goes on as
    /// `journal`; a line read took out a secret the files still hold when `secretToPurge`.
    mutating func read(
        _ state: BrokerState, keys: StateFileFormat.AccountKeys, journal: Journal, snapshotBytes: Int,
        secretToPurge: Bool
    ) {
        if let earlier = self.journal.open { close(earlier) }
        self.state = state
        self.keys = keys
        self.journal = journal
        self.snapshotBytes = snapshotBytes
        owed.staleJournalRemoval = false
        owed.secretPurge = secretToPurge
    }

    /// A snapshot of `state`, `bytes` long and naming journal `id`, was renamed into place; its
    /// descriptor `unsynced` is kept for the sync's fsync.
    mutating func snapshotWritten(
        _ state: BrokerState, keys: StateFileFormat.AccountKeys, bytes: Int, unsynced: Int32, naming id: String
    ) {
        self.state = state
        self.keys = keys
        snapshotBytes = bytes
        if let earlier = owed.snapshotFlush { close(earlier) }
        if let old = journal.open { close(old) }
        journal = .firstLineOwed(id: id)
        owed.snapshotFlush = unsynced
        owed.directoryFlush = true
        owed.journalFlush = false
        owed.secretPurge = false
        // The earlier journal is ignored from now on, but may hold what the snapshot dropped (a
        // signed-out refresh token): the sync removes it, after the snapshot's flush. Not here:
        // an unlink costs as much as the rename, and a save is written before apps hear of it. A
        // crash in between leaves a journal that the next start finds stale and removes before
        // anything else.
        owed.staleJournalRemoval = true
    }

    /// The snapshot's journal was renamed into place with its first line (`bytes` in all), which
    /// holds `state`.
    mutating func journalStarted(_ fd: Int32, bytes: Int, state: BrokerState, keys: StateFileFormat.AccountKeys) {
        self.state = state
        self.keys = keys
        journal = .appending(fd, bytes: bytes)
        owed.staleJournalRemoval = false
        owed.journalFlush = true
        owed.directoryFlush = true
    }

    /// A line of `count` bytes, which holds `state`, was appended to the journal.
    mutating func appended(_ count: Int, state: BrokerState, keys: StateFileFormat.AccountKeys, removingSecret: Bool) {
        guard case .appending(let fd, let bytes) = journal else { return }
        self.state = state
        self.keys = keys
        journal = .appending(fd, bytes: bytes + count)
        owed.journalFlush = true
        if removingSecret { owed.secretPurge = true }
    }

    /// A write or an fsync of the journal failed: it is closed and never appended to again (part
    /// of a line may be there); the next save writes a snapshot, and a new journal, over it.
    mutating func journalFailed() {
        if let fd = journal.open { close(fd) }
        journal = .snapshotOwed(open: nil)
    }

    /// What the files hold cannot be followed by a line (a snapshot's flush or a journal's
    /// rename failed, or the snapshot that takes a secret out): the next save is a snapshot. An
    /// open journal stays open for the fsync its lines are owed.
    mutating func owesSnapshot() {
        journal = .snapshotOwed(open: journal.open)
    }
}

extension FileStateStore.Written.Journal {
    /// The journal's descriptor, while one is open.
    var open: Int32? {
        switch self {
        case .snapshotOwed(let open): return open
        case .firstLineOwed: return nil
        case .appending(let fd, _): return fd
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
    /// The snapshot that takes a removed secret out of the files (of the directory) could not be
    /// written, for the reason given: the secret stays there until a snapshot is.
    case notPurged(String, String)

    public var description: String {
        switch self {
        case .io(let what, let code): return "\(what): \(String(cString: strerror(code)))"
        case .unsafe(let why), .corrupt(let why), .newerFormat(let why), .busy(let why): return why
        case .notPurged(let directory, let why):
            return "a secret taken out of the state stays in the files of \(directory) until a snapshot is "
                + "written (the next change, or a clean stop, writes one): \(why)"
        }
    }
}
