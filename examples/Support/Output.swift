import Foundation

/// Writes one line to standard output at once, unbuffered (a pipe's reader sees it now): the
/// examples speak a line protocol to the processes that drive them.
public func emit(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in _ = write(STDOUT_FILENO, bytes.baseAddress, bytes.count) }
}
