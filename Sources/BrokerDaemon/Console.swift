import Glibc

/// Standard output for the few lines brokerd prints there (its readiness line); logs go to stderr.
public enum Console {
    /// Writes one line and flushes at once, so a supervisor reading a pipe sees it now.
    public static func printLine(_ line: String) { writeLine(line, to: STDOUT_FILENO) }

    /// Writes one line to standard error.
    public static func printError(_ line: String) { writeLine(line, to: STDERR_FILENO) }

    private static func writeLine(_ line: String, to fd: Int32) {
        let bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            offset += written
        }
    }
}
