import BrokerCore
import Glibc
import Logging

/// The administrator's `clearOnSignOut`: paths under the user's home, globs allowed, removed after
/// every sign-out of the device, so that the next person finds none of the last one's downloads
/// or browser cookies. Never outside the home: a listed path that would leave it is refused at
/// start; a symbolic link is removed itself, never followed (neither as a match nor on the way to
/// one), so a link planted in the home cannot turn the clean-up against files elsewhere.
struct HomeCleaner: DeviceCleaner {
    let home: String
    /// Absolute glob patterns, each under `home`.
    let patterns: [String]
    let logger: Logger

    /// Checks every listed path (`~/...`, or absolute under `home`) before anything is served.
    init(listed: [String], home: String, logger: Logger) throws(DaemonError) {
        let home = home.hasSuffix("/") && home.count > 1 ? String(home.dropLast()) : home
        guard home.hasPrefix("/"), home != "/" else {
            throw DaemonError.configuration("clearOnSignOut needs a home directory (HOME is \(home))")
        }
        var patterns: [String] = []
        for path in listed {
            let absolute = path.hasPrefix("~/") ? home + path.dropFirst(1) : path
            let components = absolute.split(separator: "/", omittingEmptySubsequences: true)
            guard absolute.hasPrefix(home + "/"), !components.contains(".."), !components.contains("."),
                components.count > home.split(separator: "/").count
            else {
                throw DaemonError.configuration(
                    "clearOnSignOut lists \(path), which is not a path inside the home directory \(home); list only "
                        + "paths under ~/ (without .. or .), e.g. ~/Downloads/*")
            }
            patterns.append(absolute)
        }
        self.home = home
        self.patterns = patterns
        self.logger = logger
    }

    func clean() async -> (removed: [String], failed: [String]) {
        var removed: [String] = []
        var failed: [String] = []
        for pattern in patterns {
            for match in Self.glob(pattern) {
                guard reachedWithoutLinks(match) else {
                    failed.append(match + " (reached through a symbolic link; not followed)")
                    continue
                }
                if let problem = Self.remove(match) {
                    failed.append("\(match) (\(problem))")
                } else {
                    removed.append(match)
                }
            }
        }
        if !removed.isEmpty || !failed.isEmpty {
            logger.notice(
                "cleared after the sign-out (clearOnSignOut)",
                metadata: ["removed": "\(removed.count)", "failed": "\(failed)"])
        }
        return (removed, failed)
    }

    /// Whether every directory between the home and `path` is a real directory (no link).
    private func reachedWithoutLinks(_ path: String) -> Bool {
        guard path.hasPrefix(home + "/") else { return false }
        var prefix = home
        let parts = path.dropFirst(home.count + 1).split(separator: "/")
        for part in parts.dropLast() {
            prefix += "/" + part
            var info = stat()
            guard lstat(prefix, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return false }
        }
        return true
    }

    /// The paths `pattern` matches now (none when nothing does).
    static func glob(_ pattern: String) -> [String] {
        var found = glob_t()
        defer { globfree(&found) }
        guard Glibc.glob(pattern, 0, nil, &found) == 0 else { return [] }
        return (0..<Int(found.gl_pathc)).compactMap { index in found.gl_pathv[index].map { String(cString: $0) } }
    }

    /// Removes `path` (a directory with what it holds), links themselves; nil when done.
    static func remove(_ path: String) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return errno == ENOENT ? nil : String(cString: strerror(errno)) }
        if info.st_mode & S_IFMT != S_IFDIR {
            return unlink(path) == 0 ? nil : String(cString: strerror(errno))
        }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return String(cString: strerror(errno)) }
        if let problem = emptyDirectory(fd) { return problem }
        return rmdir(path) == 0 ? nil : String(cString: strerror(errno))
    }

    /// Removes what the open directory `fd` holds (and closes it), relative to it and without
    /// following a link, so that nothing swapped in meanwhile leads elsewhere.
    private static func emptyDirectory(_ fd: Int32, depth: Int = 0) -> String? {
        guard depth < 64, let directory = fdopendir(fd) else {
            close(fd)
            return depth < 64 ? String(cString: strerror(errno)) : "nested too deep"
        }
        defer { closedir(directory) }
        var problem: String?
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            var info = stat()
            guard fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if info.st_mode & S_IFMT == S_IFDIR {
                let child = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if child < 0 {
                    problem = String(cString: strerror(errno))
                    continue
                }
                if let inner = emptyDirectory(child, depth: depth + 1) { problem = inner }
                if unlinkat(fd, name, AT_REMOVEDIR) != 0 { problem = String(cString: strerror(errno)) }
            } else if unlinkat(fd, name, 0) != 0 {
                problem = String(cString: strerror(errno))
            }
        }
        return problem
    }
}
