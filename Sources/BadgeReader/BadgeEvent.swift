/// A contactless badge's UID, as the reader read it. It names a badge, not a secret (anyone near
/// the badge can read it), but it is a stable identifier of a person: it is never printed or
/// logged (``description`` is redacted), and what keeps it (the tap-in feature) stores a keyed
/// hash of ``bytes``, never the bytes.
public struct BadgeUID: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    public var description: String { "BadgeUID(\(bytes.count) bytes, redacted)" }
    public var debugDescription: String { description }
    /// `dump` and the debugger's summary show no bytes either.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

/// What a ``BadgeWatcher`` sees.
public enum BadgeEvent: Sendable, Equatable, CustomStringConvertible {
    /// A badge was put on a reader and answered with its UID.
    case tapped(BadgeUID)
    /// The badge that was tapped left the reader (or its reader went away).
    case removed
    /// A reader appeared (named as pcscd names it).
    case readerAdded(String)
    /// A reader went away.
    case readerRemoved(String)
    /// No badge can be read: pcscd is not running or not installed; the reason says what to do.
    /// The watcher keeps trying and carries on by itself once pcscd is back.
    case unavailable(String)

    public var description: String {
        switch self {
        case .tapped(let uid): "tapped \(uid)"
        case .removed: "removed"
        case .readerAdded(let name): "reader added: \(name)"
        case .readerRemoved(let name): "reader removed: \(name)"
        case .unavailable(let reason): "unavailable: \(reason)"
        }
    }
}
