/// What a sign-out managed to do at the provider. The sign-out itself (state and signal)
/// has happened whatever this says.
public struct SignOutOutcome: Sendable, Equatable {
    /// Why the device was signed out.
    public var cause: SignOutCause = .app
    /// Every refresh token was revoked (true too when there was none to revoke).
    public var tokensRevoked = true
    /// The provider's browser session was ended (only asked for with `signoutFromBrowser`).
    public var browserSessionEnded = false
    /// What could not be done, in words a person can act on.
    public private(set) var notes: [String] = []
    /// What the clean-up after the sign-out removed, and what it could not (the first paths
    /// of each, at most ``CleanUpReport/exampleLimit``; the counts say how many in all).
    public var cleanedUp: [String] = []
    public var notCleanedUp: [String] = []
    public var cleanedUpCount = 0
    public var notCleanedUpCount = 0

    public init() {}

    mutating func note(_ text: String) {
        if !notes.contains(text) { notes.append(text) }
    }
}
