import BrokerctlCore
import Glibc

/// `brokerctl-commands`, the rest of brokerctl (ArgumentParser and every command), which
/// `brokerctl` execs: kept out of this program, whose start would otherwise pay for Foundation
/// and ArgumentParser at every plain read.
///
/// Found beside this program's own executable: installed, in `../libexec/shared-device-broker/`
/// (`make install`, the package); built, in the same directory.
enum CommandsProgram {
    static let name = "brokerctl-commands"

    /// Replaces this process with `brokerctl-commands` and the same arguments; returns only to exit
    /// with a message when it cannot.
    static func run(_ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Never {
        let candidates = locations()
        for path in candidates where access(path, X_OK) == 0 {
            execv(path, argv)
            Output.error("cannot run \(path): \(String(cString: strerror(errno)))")
            exit(1)
        }
        Output.error(
            "\(name) is missing (looked for \(Output.list(candidates, separator: " and "))): "
                + "reinstall shared-device-broker; device-info, current-account and accounts work without it")
        exit(1)
    }

    /// Where it may be, in the order tried.
    static func locations() -> [String] {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return [] }
        let executable = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let directory = executable.lastIndex(of: "/").map { String(executable[..<$0]) } ?? "."
        return ["\(directory)/../libexec/shared-device-broker/\(name)", "\(directory)/\(name)"]
    }
}
