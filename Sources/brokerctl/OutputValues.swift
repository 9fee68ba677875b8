import BrokerAPI
import SharedDeviceClient

// What `--json` prints besides the library's own values.

/// `current-account --json`.
struct CurrentAccountOutput: Encodable {
    var current: Account?
    var previous: Account?

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(current, forKey: .current)  // null, not absent, when nobody
        try container.encode(previous, forKey: .previous)
    }
    enum CodingKeys: String, CodingKey { case current, previous }
}

/// `sign-out --json`.
public struct SignOutOutput: Encodable {
    var signedOut: Bool
    var cause: String
    var tokensRevoked: Bool
    /// Deprecated: always false (brokerd cannot confirm it); kept for scripts written before `browserLogoutOpened`.
    var browserSessionEnded: Bool
    /// The provider's sign-out page was handed to the browser.
    var browserLogoutOpened: Bool
    var notes: [String]
    var cleanedUp: [String]
    var notCleanedUp: [String]
    var cleanedUpCount: Int
    var notCleanedUpCount: Int

    public init(signedOut: Bool, result: SignOutResult) {
        self.signedOut = signedOut
        cause = result.cause.rawValue
        tokensRevoked = result.tokensRevoked
        browserSessionEnded = result.browserSessionEnded
        browserLogoutOpened = result.browserLogoutOpened
        notes = result.notes
        cleanedUp = result.cleanedUp
        notCleanedUp = result.notCleanedUp
        cleanedUpCount = result.cleanedUpCount
        notCleanedUpCount = result.notCleanedUpCount
    }
}

/// `watch --json`: a warning of a sign-out nobody asked for.
public struct WarningLine: Encodable {
    var event: String
    var reason: String
    var deadline: UInt64?

    public init(_ warning: SignOutWarning) {
        switch warning {
        case .pending(let reason, let deadline):
            (event, self.reason, self.deadline) = ("sign-out-pending", reason.rawValue, deadline)
        case .cancelled(let reason):
            (event, self.reason, deadline) = ("sign-out-cancelled", reason.rawValue, nil)
        }
    }
}

/// `watch --json`: the broker left the bus (`broker-left`).
public struct BrokerEventLine: Encodable {
    var event: String
    public init(event: String) { self.event = event }
}

/// `watch --json`: a change of the device's account.
public struct WatchLine: Encodable {
    var reason: String
    var current: Account?
    var previous: Account?
    /// Why, for a sign-out.
    var cause: String?
    public init(reason: String, current: Account?, previous: Account?, cause: String?) {
        (self.reason, self.current, self.previous, self.cause) = (reason, current, previous, cause)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(reason, forKey: .reason)
        try container.encode(current, forKey: .current)
        try container.encode(previous, forKey: .previous)
        try container.encodeIfPresent(cause, forKey: .cause)
    }
    enum CodingKeys: String, CodingKey { case reason, current, previous, cause }
}
