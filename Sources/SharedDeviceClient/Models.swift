import BrokerAPI

#if canImport(Glibc)
import Glibc
#endif

/// A signed-in person: the contract's own value (see `BrokerAPI`). Carries no secret.
public typealias Account = BrokerAPI.Account

/// The device's mode, as the administrator set it: `shared` (one account for the whole device,
/// signing out in one app signs out everywhere) or `default` (one account per app).
public typealias DeviceMode = BrokerAPI.DeviceMode

/// How the provider lets one app's sign-in give other apps tokens of their own: the contract's
/// own values (`native-sso`, `family-refresh-token`, `token-exchange`).
public typealias SingleSignOnMechanism = BrokerAPI.SingleSignOnMechanism

/// Why the device was signed out: an app, inactivity, the screen lock, a reboot, the provider.
public typealias SignOutCause = BrokerAPI.SignOutCause

/// A way to sign in: the contract's own values (`password`, `email-code`, `browser`).
public typealias SignInFlow = BrokerAPI.SignInFlow

/// What an app's sign-in screen can offer with the device's provider.
public struct SignInOptions: Sendable, Equatable, Codable {
    /// The flows that work: ``PublicClientApplication/signIn(username:password:scopes:)`` for
    /// `password`, ``PublicClientApplication/signIn(username:scopes:)`` for `email-code`,
    /// ``PublicClientApplication/acquireToken(_:)`` for `browser`.
    public var flows: [SignInFlow]
    /// How other apps then get tokens of their own, as far as the broker knows.
    public var singleSignOn: [SingleSignOnMechanism]
}

/// Where an interactive sign-in stands: the contract's own values (`browser-opened`,
/// `browser-unavailable`, `waiting`, `code-received`, `exchanging`).
public typealias SignInStage = BrokerAPI.SignInStage

/// One stage an interactive sign-in reached (the broker's `SignInProgress`, sent to this app alone).
public struct SignInProgress: Sendable, Equatable {
    public var stage: SignInStage
    /// With `browser-opened` and `browser-unavailable`: the sign-in page's address.
    public var url: String?
    /// With `browser-unavailable`: why no browser could be opened.
    public var reason: String?
}

/// What the broker tells about the device.
public typealias DeviceInformation = BrokerAPI.DeviceInformation

/// Where a one-time code was sent (``SignInCodeRequiredState``).
public struct CodeChallenge: Sendable, Equatable, Codable {
    /// How the code travels, e.g. `email`.
    public var channel: String
    /// The masked address it went to, e.g. `a***@c***.example`.
    public var sentTo: String
    /// How many characters the code has.
    public var codeLength: Int
    /// Creates a challenge value (apps normally get them from the broker).
    public init(channel: String, sentTo: String, codeLength: Int) {
        self.channel = channel
        self.sentTo = sentTo
        self.codeLength = codeLength
    }
}

/// What a sign-out could do at the identity provider. The account is signed out whatever it says.
public struct SignOutResult: Sendable, Equatable, Codable {
    /// Every refresh token of the account was revoked at the provider.
    public var tokensRevoked: Bool
    /// The provider's browser session was ended (asked for with `signoutFromBrowser`).
    public var browserSessionEnded: Bool
    /// What the broker could not do at the provider, in words; empty when it did everything.
    public var notes: [String]
    /// Why the device was signed out (`app` for a `SignOut`).
    public var cause: SignOutCause
    /// What the administrator's `clearOnSignOut` removed, and what it could not (each path with
    /// the reason): the first ones of each, at most 20.
    public var cleanedUp: [String]
    public var notCleanedUp: [String]
    /// How many paths the clean-up removed, and how many it could not, in all.
    public var cleanedUpCount: Int
    public var notCleanedUpCount: Int

    public init(
        tokensRevoked: Bool, browserSessionEnded: Bool, notes: [String], cause: SignOutCause = .app,
        cleanedUp: [String] = [], notCleanedUp: [String] = [], cleanedUpCount: Int? = nil,
        notCleanedUpCount: Int? = nil
    ) {
        self.cleanedUpCount = cleanedUpCount ?? cleanedUp.count
        self.notCleanedUpCount = notCleanedUpCount ?? notCleanedUp.count
        self.tokensRevoked = tokensRevoked
        self.browserSessionEnded = browserSessionEnded
        self.notes = notes
        self.cause = cause
        self.cleanedUp = cleanedUp
        self.notCleanedUp = notCleanedUp
    }
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

/// One change of the device's account.
public struct AccountChange: Sendable, Equatable {
    /// Why it changed.
    public enum Reason: String, Sendable, Codable {
        /// Somebody signed in.
        case signedIn = "signed-in"
        /// The device was signed out.
        case signedOut = "signed-out"
        /// The broker (or the bus) came back after a restart, and signals may have been missed:
        /// ``AccountChange/current`` is the broker's state now, ``AccountChange/previous`` the
        /// last state this sequence knew.
        case brokerRestarted = "broker-restarted"
    }
    /// Who is signed in now (nil: nobody).
    public var current: Account?
    /// Who was signed in before.
    public var previous: Account?
    /// Why.
    public var reason: Reason
    /// For a sign-out, what caused it (an app, inactivity, the screen lock, a reboot, the
    /// provider), so that an app can tell the person; nil when the broker did not say.
    public var cause: SignOutCause?
    /// Creates a change value.
    public init(current: Account?, previous: Account?, reason: Reason, cause: SignOutCause? = nil) {
        self.current = current
        self.previous = previous
        self.reason = reason
        self.cause = cause
    }
}
