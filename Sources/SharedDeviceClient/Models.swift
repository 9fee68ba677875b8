#if canImport(Glibc)
import Glibc
#endif
import BrokerAPI

/// A signed-in person. Carries no secret.
public struct Account: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The sign-in name, e.g. `alice@contoso.example`.
    public var username: String
    /// `<oid>.<tid>`: stable; pass it as `accountId` where a call takes one.
    public var identifier: String
    /// The directory (tenant) the account belongs to.
    public var tenantId: String
    /// The provider's host.
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

    /// `username (name)`.
    public var description: String { name.isEmpty || name == username ? username : "\(username) (\(name))" }
}

/// The device's mode, as the administrator set it.
public enum DeviceMode: String, Sendable, Codable {
    /// One account for the whole device: signing out in one app signs out everywhere.
    case shared
    /// One account per app.
    case `default`
}

/// What the broker tells about the device.
public struct DeviceInformation: Sendable, Equatable, Codable {
    /// Shared or default.
    public var deviceMode: DeviceMode
    /// The broker's version.
    public var brokerVersion: String
    /// A stable id of this device's broker state.
    public var deviceId: String
    /// The tenant the device belongs to (may be empty).
    public var tenantId: String
    /// The identity provider the broker signs in with.
    public var authority: String
    /// More facts (hostname, OS, ...).
    public var extraDeviceInformation: [String: String]
}

/// A successful sign-in or token request.
public struct TokenResult: Sendable, Equatable, Codable {
    /// The access token: opaque; send it to the resource in ``authorizationHeader``.
    public var accessToken: String
    /// When the access token expires.
    public var expiresOn: UnixTime
    /// The ID token, when the provider sent one.
    public var idToken: String?
    /// The scopes the token was asked for (normalized).
    public var scopes: [String]
    /// Who the token is for.
    public var account: Account
    /// The provider that issued it.
    public var authority: String
    /// Names the request in the broker's log.
    public var correlationId: String
    /// `Bearer <token>`, ready for an `Authorization` header.
    public var authorizationHeader: String
}

/// A point in time as seconds since 1970 (UTC); the library avoids Foundation's `Date` to keep
/// apps' start-up lean.
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
    public static func < (lhs: UnixTime, rhs: UnixTime) -> Bool { lhs.seconds < rhs.seconds }
    /// The number of seconds, as text.
    public var description: String { String(seconds) }
    public init(from decoder: any Decoder) throws { seconds = try decoder.singleValueContainer().decode(Int64.self) }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(seconds)
    }
}

/// One change of the device's account.
public struct AccountChange: Sendable, Equatable {
    /// Why it changed.
    public enum Reason: String, Sendable, Codable {
        /// Somebody signed in.
        case signedIn = "signed-in"
        /// The device was signed out.
        case signedOut = "signed-out"
        /// The broker came back after a restart; ``current`` is its state now.
        case brokerRestarted = "broker-restarted"
    }
    /// Who is signed in now (nil: nobody).
    public var current: Account?
    /// Who was signed in before.
    public var previous: Account?
    /// Why.
    public var reason: Reason
    /// Creates a change value.
    public init(current: Account?, previous: Account?, reason: Reason) {
        self.current = current
        self.previous = previous
        self.reason = reason
    }
}

/// What ``PublicClientApplication/acquireTokenSilent(_:)`` needs.
public struct SilentTokenParameters: Sendable {
    /// The scopes to ask for (`openid profile offline_access` are always added).
    public var scopes: [String]
    /// Whose token; nil means the signed-in account.
    public var account: Account?
    /// Skip the cache and use the refresh token.
    public var forceRefresh: Bool
    /// Creates the parameters.
    public init(scopes: [String], account: Account? = nil, forceRefresh: Bool = false) {
        self.scopes = scopes
        self.account = account
        self.forceRefresh = forceRefresh
    }
}

/// What ``PublicClientApplication/signOut(account:parameters:)`` needs.
public struct SignoutParameters: Sendable {
    /// Also end the provider's browser session, so the next interactive sign-in asks again.
    public var signoutFromBrowser: Bool
    /// Creates the parameters.
    public init(signoutFromBrowser: Bool = false) { self.signoutFromBrowser = signoutFromBrowser }
}
