#if canImport(Glibc)
import Glibc
#endif

/// The values both sides of the bus hold, as the contract's dictionaries carry them: one type each
/// for brokerd's core and for the apps' library (which re-exports them under the same names). The
/// dictionaries' values themselves are generated from the contract (Broker1Dictionaries.swift);
/// what they do besides carry their keys is here.

extension Account: CustomStringConvertible {
    /// Whether `other` names this account (sign-in names compare case-insensitively).
    public func hasUsername(_ other: String) -> Bool {
        username.lowercased() == other.lowercased()
    }

    /// `username (name)`.
    public var description: String { name.isEmpty || name == username ? username : "\(username) (\(name))" }
}

/// A point in time as seconds since 1970 (UTC); the contract's values avoid Foundation's `Date`
/// to keep apps' start-up lean.
public struct UnixTime: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Seconds since 1970-01-01T00:00:00Z.
    public var seconds: Int64
    /// Wraps a number of seconds since 1970.
    public init(seconds: Int64) { self.seconds = seconds }
    /// The current time.
    public static var now: UnixTime {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UnixTime(seconds: Int64(spec.tv_sec))
    }
    /// Earlier than.
    public static func < (lhs: UnixTime, rhs: UnixTime) -> Bool { lhs.seconds < rhs.seconds }
    /// The number of seconds, as text.
    public var description: String { String(seconds) }
    /// Decodes a plain number of seconds.
    public init(from decoder: any Decoder) throws { seconds = try decoder.singleValueContainer().decode(Int64.self) }
    /// Encodes a plain number of seconds.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(seconds)
    }
}
