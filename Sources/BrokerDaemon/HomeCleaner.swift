import BrokerCore
import CFileWalk
import Glibc
import Locking
import Logging

/// The administrator's `clearOnSignOut`: paths under the user's home, globs allowed, removed after
/// every sign-out of the device, so that the next person finds none of the last one's downloads
/// or browser cookies. Nothing outside the listed paths is ever removed, by construction:
/// - a listed path that would leave the home is refused at start, and `.` and `..` never match,
///   whatever the pattern (`~/.*` matches the hidden entries of the home, never the home itself
///   or its parent);
/// - the walk starts from the opened home directory and goes down one name at a time, relative to
///   the directory opened last (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or `openat`
///   with `O_NOFOLLOW | O_DIRECTORY` where the kernel lacks it; `unlinkat`): a symbolic
///   link is removed itself, never followed, neither on the way to a match nor inside a removed
///   directory, and a directory swapped for a link meanwhile is not opened;
/// - each pattern's component is matched with fnmatch(3) against the entries read from that
///   opened directory, never by glob(3) on path strings, which would resolve them again.
/// - a mount point below the home (a FUSE file system the person mounted, a USB stick) is never
///   entered nor looked at (its file system could answer slowly, or never): the mounts are read
///   from /proc/self/mountinfo before the walk, and openat2 refuses to cross one as well;
/// - the walk has a time budget (``defaultTimeBudget``): what is left then is reported, and the sign-in
///   waiting for the clean-up goes on.
/// brokerd's own state directory is kept wherever a pattern reaches it (`~/.*` would reach
/// `~/.local/state/shared-device-broker`): its pending revocations and the clean-up it owes
/// would go with it. What it did is logged path by path (debug) and summed up (notice); the
/// report holds counts and a few examples, so that a sign-out's reply stays small whatever the
/// count.
struct HomeCleaner: DeviceCleaner {
    let home: String
    /// Per listed path, its components below `home` (each a pattern of fnmatch(3)).
    let patterns: [[String]]
    /// Directories never removed nor entered, whatever matches them (brokerd's state directory).
    let kept: [String]
    let logger: Logger

    /// How deep a removed directory is followed: each level holds a descriptor open. What lies
    /// deeper is reported, not removed.
    static let maxDepth = 128

    /// How long one clean-up may take: far more than a full Downloads folder needs (450,000 files
    /// took 11 s here), and a bound on how long the next person's sign-in waits for it.
    static let defaultTimeBudget: UInt64 = 60_000_000_000
    /// Nanoseconds; a test makes it short.
    var timeBudget = Self.defaultTimeBudget

    /// Checks every listed path (`~/...`, or absolute under `home`) before anything is served.
    init(listed: [String], home: String, keeping kept: [String] = [], logger: Logger) throws(DaemonError) {
        let home = home.hasSuffix("/") && home.count > 1 ? String(home.dropLast()) : home
        guard home.hasPrefix("/"), home != "/" else {
            throw DaemonError.configuration("clearOnSignOut needs a home directory (HOME is \(home))")
        }
        var patterns: [[String]] = []
        for path in listed {
            let absolute = path.hasPrefix("~/") ? home + path.dropFirst(1) : path
            let below = absolute.hasPrefix(home + "/") ? absolute.dropFirst(home.count + 1) : ""
            let components = below.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
            guard !components.isEmpty, !components.contains(".."), !components.contains(".") else {
                throw DaemonError.configuration(
                    "clearOnSignOut lists \(path), which is not a path inside the home directory \(home); list only "
                        + "paths under ~/ (without .. or .), e.g. ~/Downloads/*")
            }
            patterns.append(components)
        }
        self.home = home
        self.patterns = patterns
        self.kept = kept
        self.logger = logger
    }

    var listsAnything: Bool { !patterns.isEmpty }

    /// Runs on a thread of its own: a large folder takes seconds of system calls, which must not
    /// hold one of brokerd's few workers.
    func clean() async -> CleanUpReport {
        await withCheckedContinuation { (continuation: CheckedContinuation<CleanUpReport, Never>) in
            let work: @Sendable () -> Void = { continuation.resume(returning: self.cleanNow()) }
            if startDetachedThread(work) != 0 { work() }
        }
    }

    /// The clean-up, on the calling thread.
    func cleanNow() -> CleanUpReport {
        var walk = Walk(logger: logger)
        walk.deadline = Self.monotonicNanoseconds() &+ timeBudget
        walk.mountPoints = Self.mountPoints(below: home)
        for path in kept {
            var info = stat()
            if stat(path, &info) == 0 { walk.kept.append(Walk.Identity(info)) }
        }
        let homeDirectory = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if homeDirectory < 0 {
            walk.failed(home, "the home directory cannot be opened: \(String(cString: strerror(errno)))")
        } else {
            for pattern in patterns { walk.match(pattern[...], in: homeDirectory, at: home) }
            close(homeDirectory)
        }
        let report = walk.report
        if report.removedCount > 0 || report.failedCount > 0 {
            logger.notice(
                "cleared after the sign-out (clearOnSignOut)",
                metadata: [
                    "removed": "\(report.removedCount)", "failed": "\(report.failedCount)",
                    "notRemoved": "\(report.failed)",
                ])
        }
        return report
    }

    /// One clean-up's walk: what it removed and could not.
    struct Walk {
        let logger: Logger
        var report = CleanUpReport()
        /// The directories kept, by device and inode (a name could be swapped, an open one not).
        var kept: [Identity] = []

        /// Paths (as the walk names them, under the home) where another file system is mounted.
        var mountPoints: Set<String> = []
        /// When the walk stops (monotonic ns), and whether it has.
        var deadline: UInt64 = .max
        var outOfTime = false

        /// Whether the walk must not look at `path`: a mount point, or the time is up (said once).
        mutating func skips(_ path: String) -> Bool {
            if outOfTime { return true }
            if HomeCleaner.monotonicNanoseconds() > deadline {
                outOfTime = true
                failed(
                    path, "the clean-up ran out of its time: this and what was not reached yet are left")
                return true
            }
            guard mountPoints.contains(path) else { return false }
            failed(path, "another file system is mounted here: not entered")
            return true
        }

        struct Identity: Equatable {
            let device: UInt64
            let inode: UInt64
            init(_ info: stat) {
                device = UInt64(info.st_dev)
                inode = UInt64(info.st_ino)
            }
        }

        static let keptReason = "brokerd's state directory: kept"

        /// Whether the open directory `fd` is one of those kept.
        func isKept(_ fd: Int32) -> Bool {
            guard !kept.isEmpty else { return false }
            var info = stat()
            return fstat(fd, &info) != 0 || kept.contains(Identity(info))
        }

        mutating func removed(_ path: String) {
            report.noteRemoved(path)
            logger.debug("cleared", metadata: ["path": "\(path)"])
        }

        mutating func failed(_ path: String, _ reason: String) {
            report.noteFailed("\(path) (\(reason))")
            logger.debug("not cleared", metadata: ["path": "\(path)", "reason": "\(reason)"])
        }

        /// Matches `components` below the open directory `directory` (`path`, for the report),
        /// and removes what the last one matches.
        mutating func match(_ components: ArraySlice<String>, in directory: Int32, at path: String) {
            guard let component = components.first else { return }
            let rest = components.dropFirst()
            let visit = { (walk: inout Walk, name: UnsafePointer<CChar>) in
                let childPath = path + "/" + String(decoding: CName.bytes(name), as: UTF8.self)
                if walk.skips(childPath) { return }
                if rest.isEmpty {
                    walk.remove(name, in: directory, at: childPath)
                    return
                }
                let child = HomeCleaner.openDirectory(name, in: directory)
                guard child >= 0 else {
                    let problem = errno
                    var info = stat()
                    if fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFLNK {
                        walk.failed(childPath, "a symbolic link: not followed")
                    } else if problem != ENOENT && problem != ENOTDIR {
                        walk.failed(childPath, String(cString: strerror(problem)))
                    }
                    return
                }
                if walk.isKept(child) {
                    walk.failed(childPath, Walk.keptReason)
                } else {
                    walk.match(rest, in: child, at: childPath)
                }
                close(child)
            }
            if let literal = Self.literal(component) {
                // A plain name: looked up, not listed (glob(3) does the same).
                if skips(path + "/" + literal) { return }
                var info = stat()
                if fstatat(directory, literal, &info, AT_SYMLINK_NOFOLLOW) == 0 { visit(&self, literal) }
                return
            }
            let listing = dup(directory)
            guard listing >= 0, let stream = fdopendir(listing) else {
                if listing >= 0 { close(listing) }
                failed(path, "cannot be listed: \(String(cString: strerror(errno)))")
                return
            }
            defer { closedir(stream) }
            // The duplicate shares the directory's offset: start at its beginning.
            rewinddir(stream)
            while let entry = readdir(stream) {
                CName.with(entry) { name in
                    // `.` and `..` are never a match, whatever the pattern.
                    guard !CName.isDotOrDotDot(name), fnmatch(component, name, FNM_PERIOD) == 0 else { return }
                    visit(&self, name)
                }
            }
        }

        /// Removes `name` of the open `directory`: a link or a file itself, a directory with what
        /// it holds (through descriptors, never by path).
        mutating func remove(_ name: UnsafePointer<CChar>, in directory: Int32, at path: String) {
            var info = stat()
            guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                if errno != ENOENT { failed(path, String(cString: strerror(errno))) }
                return
            }
            if info.st_mode & S_IFMT != S_IFDIR {
                unlinkEntry(name, in: directory, at: path)
                return
            }
            let child = HomeCleaner.openDirectory(name, in: directory)
            guard child >= 0 else {
                // Replaced since the look (by a link, or a file): that entry itself goes.
                if errno == ELOOP || errno == ENOTDIR {
                    unlinkEntry(name, in: directory, at: path)
                } else if errno != ENOENT {
                    failed(path, String(cString: strerror(errno)))
                }
                return
            }
            if isKept(child) {
                close(child)
                failed(path, Self.keptReason)
                return
            }
            let emptied = empty(child, at: path, depth: 1)
            close(child)
            guard emptied else { return }
            if unlinkat(directory, name, AT_REMOVEDIR) == 0 {
                removed(path)
            } else if errno != ENOENT {
                failed(path, String(cString: strerror(errno)))
            }
        }

        private mutating func unlinkEntry(_ name: UnsafePointer<CChar>, in directory: Int32, at path: String) {
            if unlinkat(directory, name, 0) == 0 {
                removed(path)
            } else if errno != ENOENT {
                failed(path, String(cString: strerror(errno)))
            }
        }

        /// Removes what the open `directory` holds; whether all of it went.
        private mutating func empty(_ directory: Int32, at path: String, depth: Int) -> Bool {
            guard depth <= HomeCleaner.maxDepth else {
                failed(path, "nested more than \(HomeCleaner.maxDepth) directories deep; not removed")
                return false
            }
            let listing = dup(directory)
            guard listing >= 0, let stream = fdopendir(listing) else {
                if listing >= 0 { close(listing) }
                failed(path, "cannot be listed: \(String(cString: strerror(errno)))")
                return false
            }
            defer { closedir(stream) }
            rewinddir(stream)
            var complete = true
            while let entry = readdir(stream) {
                CName.with(entry) { name in
                    guard !CName.isDotOrDotDot(name) else { return }
                    let inner = path + "/" + String(decoding: CName.bytes(name), as: UTF8.self)
                    if skips(inner) {
                        complete = false
                        return
                    }
                    var info = stat()
                    guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                        if errno != ENOENT {
                            failed(inner, String(cString: strerror(errno)))
                            complete = false
                        }
                        return
                    }
                    if info.st_mode & S_IFMT == S_IFDIR {
                        let child = HomeCleaner.openDirectory(name, in: directory)
                        if child >= 0 {
                            if isKept(child) {
                                close(child)
                                failed(inner, Self.keptReason)
                                complete = false
                                return
                            }
                            let emptied = empty(child, at: inner, depth: depth + 1)
                            close(child)
                            guard emptied else {
                                complete = false
                                return
                            }
                            if unlinkat(directory, name, AT_REMOVEDIR) == 0 || errno == ENOENT { return }
                        } else if errno == ELOOP || errno == ENOTDIR {
                            // Replaced by a link or a file since the look: that entry itself goes.
                            if unlinkat(directory, name, 0) == 0 || errno == ENOENT { return }
                        } else if errno == ENOENT {
                            return
                        }
                    } else if unlinkat(directory, name, 0) == 0 || errno == ENOENT {
                        return
                    }
                    failed(inner, String(cString: strerror(errno)))
                    complete = false
                }
            }
            return complete
        }

        /// The name a component stands for when it has no pattern characters (nil otherwise).
        static func literal(_ component: String) -> String? {
            component.contains { "*?[\\".contains($0) } ? nil : component
        }
    }

    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }

    /// Where file systems are mounted below `home`, named as the walk names paths (from `home`,
    /// whose own path may differ from the kernel's through a link). From /proc/self/mountinfo,
    /// whose fifth field is the mount point with space, tab, newline and backslash as octal.
    static func mountPoints(below home: String) -> Set<String> {
        guard let real = realpath(home, nil) else { return [] }
        let realHome = String(cString: real)
        free(real)
        guard let file = fopen("/proc/self/mountinfo", "re") else { return [] }
        defer { fclose(file) }
        var points: Set<String> = []
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let fields = String(cString: line).split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count > 4 else { continue }
            let point = unescapedMountPoint(fields[4])
            guard point.hasPrefix(realHome + "/") else { continue }
            points.insert(home + point.dropFirst(realHome.count))
        }
        return points
    }

    /// A mount point as mountinfo writes it (`\040` for a space), as the file system names it.
    static func unescapedMountPoint(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        let utf8 = Array(field.utf8)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count,
                let value = UInt8(String(decoding: utf8[(index + 1)...(index + 3)], as: UTF8.self), radix: 8)
            {
                bytes.append(value)
                index += 4
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `name` of the open `directory`, opened as a directory beneath it without following a link
    /// (openat2 with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it).
    static func openDirectory(_ name: UnsafePointer<CChar>, in directory: Int32) -> Int32 {
        cfw_open_directory_beneath(directory, name)
    }
}

/// A directory entry's name as the kernel gave it (bytes, not necessarily UTF-8), for the calls
/// that act on it; text only for the report.
private enum CName {
    static func with(_ entry: UnsafeMutablePointer<dirent>, _ body: (UnsafePointer<CChar>) -> Void) {
        withUnsafePointer(to: &entry.pointee.d_name) { tuple in
            tuple.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: tuple.pointee)) { body($0) }
        }
    }

    static func bytes(_ name: UnsafePointer<CChar>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: name, count: strlen(name))
    }

    static func isDotOrDotDot(_ name: UnsafePointer<CChar>) -> Bool {
        name[0] == 0x2E && (name[1] == 0 || (name[1] == 0x2E && name[2] == 0))
    }
}
