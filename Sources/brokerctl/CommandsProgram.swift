import BrokerctlCore
import Glibc

/// `brokerctl-commands`, the rest of brokerctl (ArgumentParser and every command), which
/// `brokerctl` execs: kept out of this program, whose start would otherwise pay for Foundation
/// and ArgumentParser at every plain read.
///
/// Found beside this program's own executable: installed, in `../libexec/shared-device-broker/`
/// (`make install`, the package); built, in the same directory. A file there that another user
/// could have put or changed, or a symbolic link (to anything), is not run: brokerctl may be run
/// from a directory others can write. Such a file is passed over for the next place, so that
/// one planted beside brokerctl cannot stop the installed program from running.
enum CommandsProgram {
    static let name = "brokerctl-commands"

    /// Replaces this process with `brokerctl-commands` and the same arguments; returns only to exit
    /// with a message when it cannot: 127 when it is not there, 126 when it is not run.
    static func run(_ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Never {
        let candidates = locations(argv)
        var refused: [String] = []
        for path in candidates {
            // The file checked is the file run: opened once, without following a link, and run
            // through its descriptor.
            let file = open(path, openPath | O_NOFOLLOW | O_CLOEXEC)
            guard file >= 0 else {
                if errno != ENOENT && errno != ENOTDIR { refused.append("\(path) cannot be opened (\(lastError))") }
                continue
            }
            if let why = unusable(file) {
                close(file)
                refused.append("\(path) \(why)")
                continue
            }
            fexecve(file, argv, environ)
            refused.append("\(path) cannot be run (\(lastError))")
            close(file)
        }
        if !refused.isEmpty {
            Output.error(Output.list(refused, separator: "; ") + ": not run")
            exit(126)
        }
        let looked =
            candidates.isEmpty
            ? "brokerctl's own directory is unknown" : "looked for " + Output.list(candidates, separator: " and ")
        Output.error(
            "\(name), which runs every command but device-info, current-account and accounts, is missing "
                + "(\(looked)): install shared-device-broker again, or build both programs (swift build)")
        exit(127)
    }

    /// Where it may be, in the order tried: beside this program's executable (`/proc/self/exe`, else
    /// `argv[0]` when it is a path).
    static func locations(_ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> [String] {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        let executable =
            count > 0 ? String(cString: Array(buffer[..<count]) + [0]) : argv[0].map { String(cString: $0) } ?? ""
        guard let slash = executable.lastIndex(of: "/") else { return [] }
        let directory = String(executable[..<slash])
        return ["\(directory)/../libexec/shared-device-broker/\(name)", "\(directory)/\(name)"]
    }

    /// Why the file open as `file` is not run, if it is not: not an executable regular file, or
    /// one a user other than root or this one could have written.
    static func unusable(_ file: Int32) -> String? {
        var info = stat()
        guard fstat(file, &info) == 0 else { return "cannot be read (\(lastError))" }
        guard info.st_mode & S_IFMT != S_IFLNK else { return "is a symbolic link" }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o111 != 0 else { return "is not an executable file" }
        guard info.st_uid == 0 || info.st_uid == geteuid() else {
            return "belongs to another user (uid \(info.st_uid))"
        }
        // Group-writable only for this user's own group (a user private group, umask 002).
        let groupWritable = info.st_mode & 0o020 != 0 && info.st_gid != getegid() && info.st_gid != 0
        guard info.st_mode & 0o002 == 0, !groupWritable else { return "is writable by other users" }
        return nil
    }

    /// `O_PATH`, which Glibc's module leaves out (a `_GNU_SOURCE` name): the same value on every
    /// architecture Swift runs Linux on.
    private static let openPath: Int32 = 0o10_000_000

    private static var lastError: String { String(cString: strerror(errno)) }

}
