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

    private struct Written {
        /// The state the files hold, when known: a save of the same writes nothing, and a save of
        /// another state appends the difference.
        var state: BrokerState?
        /// The account keys the files use.
        var keys = StateFileFormat.AccountKeys()
        /// The journal, open for appending, while its lines may follow the snapshot.
        var journal: Int32?
        /// The id of the journal the snapshot names, not written yet: its first line creates it
        /// (so that a snapshot writes one file, and a journal exists only with lines).
        var pendingJournal: String?
        var journalBytes = 0
        var snapshotBytes = 0
        /// The snapshot of the last save, still to be fsynced (with the journal and the directory).
        var unsyncedSnapshot: Int32?
        /// Lines appended since the last fsync of the journal.
        var journalUnsynced = false
        /// Renames not yet made durable by an fsync of the directory.
        var directoryUnsynced = false
        /// `state.journal` is an earlier snapshot's, to be removed by the next ``sync()``.
        var staleJournal = false
        /// A line took a secret out of the state that the files still hold: the next ``sync()``
        /// writes a snapshot.
        var secretsToPurge = false
        /// The files do not hold `state` as lines can follow (loaded from an older format or a
        /// journal cut short, or a write or flush failed): the next save, or compact, is a snapshot.
        var needsSnapshot = false
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
            if let fd = $0.unsyncedSnapshot { close(fd) }
            if let fd = $0.journal { close(fd) }
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
        var appendTo: Int32?
        var pending: String?
        if loaded.version == StateFileFormat.currentVersion, let snapshot = loaded.journal {
            if journalBytes == 0 || replayed.stale {
                // No line since the snapshot: the first one starts its journal. A journal of an
                // earlier snapshot (a crash cut off its removal) may hold what that snapshot took
                // off the disk, a secret held nowhere any more: it goes now.
                if replayed.stale {
                    unlink(journalPath)
                    syncDirectory()
                }
                pending = snapshot
            } else if replayed.tornBytes == 0 {
                let fd = open(journalPath, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW)
                if fd >= 0 { appendTo = fd }
            }
        }
        written.withLock {
            if let earlier = $0.journal { close(earlier) }
            $0.state = state
            $0.keys = StateFileFormat.AccountKeys(table: loaded.accounts)
            $0.journal = appendTo
            $0.pendingJournal = pending
            $0.journalBytes = appendTo == nil ? 0 : journalBytes
            $0.snapshotBytes = bytes.count
            $0.needsSnapshot = appendTo == nil && pending == nil
            $0.staleJournal = false
            $0.secretsToPurge = replayed.removedSecret
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
            guard let old = written.state, !written.needsSnapshot else {
                return try writeSnapshot(state, into: &written)
            }
            var keys = written.keys
            switch StateJournal.change(from: old, to: state, revoked: revoked, keys: &keys) {
            case .none: return
            case .line(let line, let removesSecret):
                if written.journal == nil, let id = written.pendingJournal {
                    // Starting a journal costs a rename, as a snapshot does, which also takes the
                    // secret off the disk at once.
                    if removesSecret { return try writeSnapshot(state, into: &written) }
                    try startJournal(id, with: line, into: &written)
                    written.keys = keys
                    written.state = state
                    return
                }
                guard let journal = written.journal,
                    written.journalBytes < max(Self.minimumCompactionBytes, written.snapshotBytes)
                else { return try writeSnapshot(state, into: &written) }
                do {
                    try writeAll(line, to: journal, naming: journalPath)
                } catch {
                    // Part of the line may be there: the journal is not appended to again, the
                    // next save writes a snapshot (and a new journal) over it.
                    written.journal = nil
                    close(journal)
                    written.needsSnapshot = true
                    throw error
                }
                written.keys = keys
                written.journalBytes += line.count
                written.journalUnsynced = true
                written.state = state
                // The line is what apps are told of; the snapshot that takes the secret out of
                // the files waits for the sync, which the broker runs after telling them.
                if removesSecret { written.secretsToPurge = true }
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
            if written.secretsToPurge, let state = written.state {
                do {
                    try writeSnapshot(state, into: &written)
                } catch {
                    written.needsSnapshot = true
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
            guard written.staleJournal else { return }
            unlink(journalPath)
            written.staleJournal = false
        }
        defer { removeStaleJournal() }
        if let snapshot = written.unsyncedSnapshot {
            written.unsyncedSnapshot = nil
            let synced = system.fsync(snapshot) == 0
            let code = errno
            close(snapshot)
            removeStaleJournal()
            guard synced else {
                // A failed fsync is not retried (Linux may report success the second time
                // without the data): the next save writes everything again.
                written.needsSnapshot = true
                throw StoreError.io("cannot fsync \(path)", code)
            }
        }
        if written.journalUnsynced, let journal = written.journal {
            guard system.fsync(journal) == 0 else {
                let code = errno
                written.journal = nil
                close(journal)
                written.needsSnapshot = true
                throw StoreError.io("cannot fsync \(journalPath)", code)
            }
            written.journalUnsynced = false
        }
        if written.directoryUnsynced {
            let dirFD = system.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
            guard dirFD >= 0 else { throw StoreError.io("cannot open \(directory) to fsync it", errno) }
            defer { close(dirFD) }
            guard system.fsync(dirFD) == 0 else { throw StoreError.io("cannot fsync \(directory)", errno) }
            written.directoryUnsynced = false
        }
    }

    /// Folds the journal into a new snapshot, durably, when it holds any change: at a clean stop,
    /// so that `state.json` alone holds the state.
    public func compact() throws {
        try written.withLock { (written: inout Written) throws in
            guard let state = written.state, written.needsSnapshot || written.journal != nil else { return }
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
        written.state = state
        written.keys = keys
        written.snapshotBytes = bytes.count
        if let earlier = written.unsyncedSnapshot { close(earlier) }
        written.unsyncedSnapshot = snapshot.fd
        written.directoryUnsynced = true
        if let old = written.journal { close(old) }
        written.journal = nil
        // The earlier journal is ignored from now on, but may hold what the snapshot dropped (a
        // signed-out refresh token): the sync removes it, after the snapshot's flush. Not here:
        // an unlink costs as much as the rename, and a save is written before apps hear of it. A
        // crash in between leaves a journal that the next start finds stale and removes before
        // anything else.
        written.staleJournal = true
        written.secretsToPurge = false
        written.journalBytes = 0
        written.journalUnsynced = false
        written.pendingJournal = id
        written.needsSnapshot = false
    }

    /// The journal `id` the snapshot names, with its first line: a temporary file renamed over
    /// the journal of an earlier snapshot (ignored since that snapshot was replaced), so that the
    /// journal on disk is never one that names this snapshot but lacks a line it was given.
    private func startJournal(_ id: String, with line: [UInt8], into written: inout Written) throws {
        let journal = try writeTemporary(StateJournal.header(snapshot: id) + line, named: "journal")
        guard system.rename(journal.path, journalPath) == 0 else {
            let code = errno
            close(journal.fd)
            unlink(journal.path)
            // The line is not written; a snapshot will hold it.
            written.needsSnapshot = true
            throw StoreError.io("cannot rename \(journal.path) to \(journalPath)", code)
        }
        written.journal = journal.fd
        written.staleJournal = false
        written.pendingJournal = nil
        written.journalBytes = StateJournal.header(snapshot: id).count + line.count
        written.journalUnsynced = true
        written.directoryUnsynced = true
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
