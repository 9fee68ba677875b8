import Foundation

/// Writes one line to standard output at once, unbuffered (a pipe's reader sees it now).
func emit(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in _ = write(STDOUT_FILENO, bytes.baseAddress, bytes.count) }
}
