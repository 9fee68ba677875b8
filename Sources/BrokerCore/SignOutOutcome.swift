/// What a sign-out managed to do at the provider and on the device: the contract's
/// `SignOutResult`, which apps read as it is. The sign-out itself (state and signal) has happened
/// whatever it says.
public typealias SignOutOutcome = SignOutResult

extension SignOutResult {
    /// Nothing done yet: no token left unrevoked, no sign-out page opened, nothing cleaned up.
    public init() {
        self.init(
            tokensRevoked: true, browserSessionEnded: false, browserLogoutOpened: false, notes: [], cause: .app,
            cleanedUp: [], notCleanedUp: [], cleanedUpCount: 0, notCleanedUpCount: 0)
    }

    /// Adds what could not be done, once.
    mutating func note(_ text: String) {
        if !notes.contains(text) { notes.append(text) }
    }
}
