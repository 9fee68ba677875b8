import Glibc
import TextRules

/// The file in which a brokerd that could not start leaves why (see brokerd's `StartFailure`),
/// read back by the client library when the bus says the broker failed to start: its first line
/// is `status=N pid=N time=UNIX`, the rest the message brokerd printed.
public enum StartFailureRecord {
    public static let fileName = "brokerd-start-failure.log"

    /// brokerd's default state directory: `$XDG_STATE_HOME/shared-device-broker`, else
    /// `~/.local/state/shared-device-broker`. The failure is kept there whatever `--state-dir`
    /// says, as a client cannot know that.
    public static func defaultStateDirectory() -> String {
        if let state = getenv("XDG_STATE_HOME").map({ String(cString: $0) }), state.hasPrefix("/") {
            return state + "/shared-device-broker"
        }
        let home = getenv("HOME").map { String(cString: $0) } ?? "/tmp"
        return home + "/.local/state/shared-device-broker"
    }

    public static var defaultPath: String { defaultStateDirectory() + "/" + fileName }

    public static func format(message: String, status: Int32, pid: Int32, time: Int64) -> String {
        "status=\(status) pid=\(pid) time=\(time)\n\(message)\n"
    }

    /// What the last failed start left at `path`: its message and when (unix seconds), or nil.
    public static func read(path: String = defaultPath) -> (message: String, time: Int64)? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 8192)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self)
        guard let newline = text.firstIndex(of: "\n") else { return nil }
        let header = text[..<newline].split(separator: " ")
        let time = header.first { $0.hasPrefix("time=") }.flatMap { Int64($0.dropFirst(5)) } ?? 0
        // Text from a file, shown to a person: each line by the outside-text rule, empty ones dropped.
        let message = text[text.index(after: newline)...].split(separator: "\n").map {
            OutsideText.cleaned(String($0))
        }.filter { line in !line.allSatisfy { $0.isWhitespace } }.joined(separator: "\n")
        return message.isEmpty ? nil : (message, time)
    }
}
