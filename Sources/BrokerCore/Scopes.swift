/// A normalized set of scopes: the key of the token cache and what the provider is asked for.
///
/// Normalizing makes `["User.Read"]` and `["openid", "user.read"...]` requests share tokens only
/// when they really ask for the same thing: the reserved OpenID Connect scopes are lowercased and
/// always present, the rest keep their case (resource scopes are case-sensitive at some providers),
/// duplicates go, and the order is fixed.
public struct Scopes: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The scopes every request carries: an ID token, the profile, and a refresh token.
    public static let reserved = ["openid", "profile", "offline_access"]

    /// Sorted, without duplicates, reserved scopes included.
    public let values: [String]

    public init(_ requested: [String]) {
        var set = Set(Self.reserved)
        for scope in requested {
            let lowered = scope.lowercased()
            set.insert(Self.reserved.contains(lowered) || lowered == "email" ? lowered : scope)
        }
        values = set.sorted()
    }

    /// The scopes beyond the reserved ones, the part that names resources.
    public var resourceScopes: [String] { values.filter { !Self.reserved.contains($0) } }

    /// Space-separated, as OAuth's `scope` parameter wants it.
    public var joined: String { values.joined(separator: " ") }

    public var description: String { joined }

    /// Whether every scope of `other` is here too (a granted set covers a requested one).
    public func covers(_ other: Scopes) -> Bool {
        let mine = Set(values.map { $0.lowercased() })
        return other.values.allSatisfy { mine.contains($0.lowercased()) }
    }

    public init(from decoder: any Decoder) throws {
        self.init(try decoder.singleValueContainer().decode([String].self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(values)
    }
}
