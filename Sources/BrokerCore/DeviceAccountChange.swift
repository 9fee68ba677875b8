/// One change of the device's account, announced with the `AccountChanged` signal. (Apps see it
/// through the client library's `AccountChange`, which also says when the broker restarted.)
public struct DeviceAccountChange: Sendable, Equatable {
    public var current: Account?
    public var previous: Account?
    public var reason: AccountChangeReason
    /// Why, for a sign-out.
    public var cause: SignOutCause?

    public init(current: Account?, previous: Account?, reason: AccountChangeReason, cause: SignOutCause? = nil) {
        self.current = current
        self.previous = previous
        self.reason = reason
        self.cause = cause
    }

    /// `previous` as the signal carries it: the account that left, and why.
    public var departed: DepartedAccount? {
        previous.map { DepartedAccount(account: $0, signOutCause: cause) }
    }
}

/// The warning of a sign-out the person did not ask for (`SignOutPending`, `SignOutCancelled`,
/// the `SignOutDeadline` property).
public enum ShiftWarning: Sendable, Equatable {
    /// The device is signed out at `deadline` (unix seconds) unless the person is active.
    case pending(cause: SignOutCause, deadline: Int64)
    /// The person was active: no sign-out.
    case cancelled(cause: SignOutCause)
    /// The warning ended with the sign-out (or the sign-out came another way).
    case over
}

/// A stage an interactive sign-in reached, addressed to the caller that started it: the core's
/// report, which brokerd sends as the `SignInProgress` signal to that caller alone. Apps read the
/// client library's `SignInProgress` (stage, url, reason), decoded from the signal.
public struct SignInProgressReport: Sendable, Equatable {
    /// The caller (bus connection) the sign-in belongs to: the one the signal goes to.
    public var owner: String
    public var flowId: String
    public var stage: SignInStage
    public var details: SignInProgressDetails
}
