import BrokerAPI
import FoundationEssentials
import Glibc
import SharedDeviceClient
import TextRules

/// How brokerctl prints: aligned text for people, sorted JSON for scripts.
///
/// Much of what it prints comes from outside: names, messages and addresses from the identity
/// provider, through the broker. In text, each such value is ``shown(_:)``: an escape sequence,
/// a bell or a right-to-left override in a display name must not reach the terminal. JSON needs
/// nothing of the kind: its encoder escapes control characters, and a script reads the exact
/// value.
public enum Output {
    /// A value from outside, for the terminal (``OutsideText/escaped(_:)``).
    public static func shown(_ value: String) -> String { OutsideText.escaped(value) }

    /// `value` as sorted, indented JSON.
    public static func json<T: Encodable>(_ value: T) { line(jsonText(value, pretty: true)) }

    /// One JSON object on one line, for streams.
    public static func jsonLine<T: Encodable>(_ value: T) { line(jsonText(value, pretty: false)) }

    /// Keys sorted (scripts and tests compare the text), slashes as they are (URLs stay readable).
    /// A value brokerctl cannot write as JSON is its own mistake: said, and the command fails,
    /// rather than printing nothing with status 0.
    private static func jsonText<T: Encodable>(_ value: T, pretty: Bool) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting =
            pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        do { return String(decoding: try encoder.encode(value), as: UTF8.self) } catch {
            self.error("cannot write the answer as JSON: \(error)")
            exit(70)  // EX_SOFTWARE
        }
    }

    /// `label: value` lines with the values aligned; labels and values are shown as outside text
    /// (some labels are the broker's too: `extraDeviceInformation`'s keys).
    public static func fields(_ rows: [(String, String)]) {
        let shownRows = rows.map { (shown($0.0), shown($0.1)) }
        let width = shownRows.map(\.0.count).max() ?? 0
        var text = ""
        for (label, value) in shownRows {
            text += label + ":" + String(repeating: " ", count: width - label.count + 2) + value + "\n"
        }
        standardOutput(text)
    }

    /// `items` separated by `separator`, as `joined(separator:)` would. Not `joined` itself: it is
    /// generic over the sequence, and its first use makes the Swift runtime search every
    /// protocol conformance of the binary for `[String]`'s `Collection` (as `print` would, see
    /// ``standardOutput(_:)``).
    public static func list(_ items: [String], separator: String = ", ") -> String {
        var text = ""
        for index in items.indices {
            if index > 0 { text += separator }
            text += items[index]
        }
        return text
    }

    public static func line(_ text: String) { standardOutput(text + "\n") }

    /// `text` on standard output as it is, after what `print` buffered. Not `print` itself: its
    /// dynamic casts of the value (is it `TextOutputStreamable`, `CustomStringConvertible`?) make
    /// the Swift runtime search every protocol conformance of the binary on first use, a
    /// noticeable part of a short command.
    public static func standardOutput(_ text: String) {
        var text = text
        fflush(nil)
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(STDOUT_FILENO, bytes.baseAddress?.advanced(by: offset), bytes.count - offset)
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// `username (name) [identifier]`, shown as outside text.
    public static func account(_ account: Account?) -> String {
        guard let account else { return "none" }
        return shown("\(account.description) [\(account.identifier)]")
    }

    public static func expiry(_ time: UnixTime) -> String {
        let left = time.seconds - UnixTime.now.seconds
        let relative = left <= 0 ? "expired" : left < 120 ? "in \(left) s" : "in \(left / 60) min"
        return "\(relative) (unix time \(time.seconds))"
    }

    /// An error, usually the broker's: its message may quote the provider.
    public static func error(_ message: String) {
        writeStandardError("brokerctl: \(shown(message))\n")
    }

    /// A broker error: its D-Bus error name and message, as every command reports one.
    public static func brokerError(_ error: BrokerError) {
        self.error("\(error.errorName): \(error.message)")
    }

    /// A line for the person at the terminal, on standard error so that standard output stays
    /// the command's result.
    public static func note(_ message: String) {
        writeStandardError(message + "\n")
    }

    /// A QR code of `text` on standard error, drawn by `qrencode` when it is installed and
    /// standard error is a terminal; nothing otherwise.
    public static func qrCode(_ text: String) {
        let candidates: [String] = ["/usr/bin/qrencode", "/usr/local/bin/qrencode"]
        guard isatty(STDERR_FILENO) != 0, let path = candidates.first(where: { access($0, X_OK) == 0 }) else { return }
        fflush(nil)
        var pid = pid_t()
        let arguments = [path, "-t", "ANSIUTF8", "-o", "-", text]
        var argv = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO)
        guard posix_spawn(&pid, path, &actions, nil, &argv, environ) == 0 else { return }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    /// A question, without a newline, on standard error.
    public static func prompt(_ question: String) {
        writeStandardError(question)
    }

    private static func writeStandardError(_ text: String) {
        let bytes = Array(text.utf8)
        fflush(nil)
        _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    /// Prints now, even when stdout is a pipe (for `watch`).
    public static func flush() { fflush(nil) }
}
