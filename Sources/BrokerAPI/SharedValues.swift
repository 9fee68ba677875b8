/// The values both sides of the bus hold, as the contract's dictionaries carry them: one type each
/// for brokerd's core and for the apps' library (which re-exports them under the same names).

/// A signed-in person, as the broker hands it to apps: the contract's account dictionary.
/// Carries no secret.
public struct Account: Sendable, Hashable, Codable, CustomStringConvertible {
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

    /// Creates an account value (apps normally get them from the broker).
    public init(username: String, identifier: String, tenantId: String, environment: String, name: String) {
        self.username = username
        self.identifier = identifier
        self.tenantId = tenantId
        self.environment = environment
        self.name = name
    }

    /// Whether `other` names this account (sign-in names compare case-insensitively).
    public func hasUsername(_ other: String) -> Bool {
        username.lowercased() == other.lowercased()
    }

    /// `username (name)`.
    public var description: String { name.isEmpty || name == username ? username : "\(username) (\(name))" }
}

/// What the broker tells about the device (`GetDeviceInformation`).
public struct DeviceInformation: Sendable, Equatable, Codable {
    /// Shared or default.
    public var deviceMode: DeviceMode
    /// The broker's version.
    public var brokerVersion: String
    /// A stable id of this device's broker state.
    public var deviceId: String
    /// The tenant the device belongs to, as the administrator configured it (may be empty).
    public var tenantId: String
    /// The identity provider the broker signs in with.
    public var authority: String
    /// More facts (hostname, OS, ...).
    public var extraDeviceInformation: [String: String]
    /// How the provider lets one app's sign-in give other apps tokens of their own, in the order
    /// the broker uses them; empty when it offers none, nil while the broker has not reached it.
    public var singleSignOn: [SingleSignOnMechanism]?

    public init(
        deviceMode: DeviceMode, brokerVersion: String, deviceId: String, tenantId: String, authority: String,
        extraDeviceInformation: [String: String], singleSignOn: [SingleSignOnMechanism]?
    ) {
        self.deviceMode = deviceMode
        self.brokerVersion = brokerVersion
        self.deviceId = deviceId
        self.tenantId = tenantId
        self.authority = authority
        self.extraDeviceInformation = extraDeviceInformation
        self.singleSignOn = singleSignOn
    }
}
