import Glibc
import Logging

/// Log lines for the systemd journal: when brokerd's standard error is the journal's stream
/// (`JOURNAL_STREAM` names its device and inode, as systemd sets it for a unit), each line starts
/// with its syslog priority, `<4>` for a warning, and carries no timestamp of its own (the journal
/// stamps each entry). So `journalctl --user -u shared-device-broker -p warning` shows brokerd's
/// warnings and worse, each once, with the journal's time.
public struct JournalLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    private let label: String

    public init(label: String) { self.label = label }

    /// Whether standard error is the journal stream `JOURNAL_STREAM` names.
    public static var standardErrorIsJournal: Bool {
        guard let value = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(STDERR_FILENO, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// The syslog priority of a level (sd-daemon(3)'s `SD_*` prefixes).
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let fields = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        // One entry per line: a newline in a message would start an entry without a priority.
        let text = "\(event.message)".replacing("\n", with: " ")
        Console.printError("<\(Self.priority(event.level))>\(label): \(text)\(fields.isEmpty ? "" : " " + fields)")
    }
}
