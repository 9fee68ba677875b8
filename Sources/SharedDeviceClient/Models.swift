import BrokerAPI

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

/// What an app's sign-in screen can offer with the device's provider: `flows` that work
/// (``PublicClientApplication/signIn(username:password:scopes:)`` for `password`,
/// ``PublicClientApplication/signIn(username:scopes:)`` for `email-code`,
/// ``PublicClientApplication/acquireToken(_:)`` for `browser`), and how other apps then get
/// tokens of their own (`singleSignOn`).
public typealias SignInOptions = BrokerAPI.SignInOptions

/// Where a one-time code was sent (``SignInCodeRequiredState``).
public typealias CodeChallenge = BrokerAPI.CodeChallenge

/// What a sign-out could do at the identity provider and on the device. The account is signed
/// out whatever it says.
public typealias SignOutResult = BrokerAPI.SignOutResult

/// A successful sign-in or token request.
public typealias TokenResult = BrokerAPI.TokenResult

/// A point in time as seconds since 1970 (UTC).
public typealias UnixTime = BrokerAPI.UnixTime

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

extension SignOutResult {
    /// Creates a result value (apps normally get them from the broker); the counts default to the
    /// paths given. `browserSessionEnded` is deprecated: the broker always reports false (it cannot
    /// confirm that the provider ended its session); `browserLogoutOpened` says what it did.
    public init(
        tokensRevoked: Bool, browserSessionEnded: Bool = false, browserLogoutOpened: Bool = false, notes: [String],
        cause: SignOutCause = .app, cleanedUp: [String] = [], notCleanedUp: [String] = [], cleanedUpCount: Int? = nil,
        notCleanedUpCount: Int? = nil
    ) {
        self.init(
            tokensRevoked: tokensRevoked, browserSessionEnded: browserSessionEnded,
            browserLogoutOpened: browserLogoutOpened, notes: notes, cause: cause, cleanedUp: cleanedUp,
            notCleanedUp: notCleanedUp, cleanedUpCount: cleanedUpCount ?? cleanedUp.count,
            notCleanedUpCount: notCleanedUpCount ?? notCleanedUp.count)
    }
}
