import BrokerAPI
import Logging

/// brokerd's log lines, whichever handler writes them (the journal's or swift-log's standard
/// one): the message and every metadata value pass through ``OutsideText/escaped(_:)`` first.
/// Log lines carry values from outside (a caller's correlation id, a provider's error text, a
/// program's path): escaped, a newline in one cannot start a line of its own, such as a forged
/// `<2>` entry the journal would file as critical, and an escape sequence cannot reach the
/// terminal of whoever reads the log. It is done here, once for every line, rather than at each
/// call site, so that no call site can forget it.
public struct EscapingLogHandler: LogHandler {
    private var inner: any LogHandler

    public init(_ inner: any LogHandler) { self.inner = inner }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        event.message = "\(OutsideText.escaped(event.message.description))"
        event.metadata = event.metadata?.mapValues(Self.escaped)
        inner.log(event: event)
    }

    static func escaped(_ value: Logger.MetadataValue) -> Logger.MetadataValue {
        switch value {
        case .string(let text): .string(OutsideText.escaped(text))
        case .stringConvertible(let value): .string(OutsideText.escaped(value.description))
        case .dictionary(let entries): .dictionary(entries.mapValues(escaped))
        case .array(let values): .array(values.map(escaped))
        }
    }
}
