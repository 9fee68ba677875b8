/// A signed-in person, as the broker hands it to apps. Carries no secret.
public struct Account: Sendable, Hashable, Codable {
    /// The sign-in name (`preferred_username`), e.g. `alice@contoso.example`.
    public var username: String
    /// `<oid>.<tid>`: stable across renames; what `accountId` arguments refer to.
    public var identifier: String
    /// The directory (tenant) the account belongs to.
    public var tenantId: String
    /// The provider's host, e.g. `login.contoso.example` or `127.0.0.1:8443`.
    public var environment: String
    /// The display name.
    public var name: String

    public init(username: String, identifier: String, tenantId: String, environment: String, name: String) {
        self.username = username
        self.identifier = identifier
        self.tenantId = tenantId
        self.environment = environment
        self.name = name
    }

    /// Whether `username` names this account (sign-in names compare case-insensitively).
    public func hasUsername(_ other: String) -> Bool {
        username.lowercased() == other.lowercased()
    }
}

/// One change of the device's account, announced with the `AccountChanged` signal.
public struct AccountChange: Sendable, Equatable {
    public var current: Account?
    public var previous: Account?
    public var reason: AccountChangeReason

    public init(current: Account?, previous: Account?, reason: AccountChangeReason) {
        self.current = current
        self.previous = previous
        self.reason = reason
    }
}
