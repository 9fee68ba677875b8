/// Tokens kept where a person must unlock them first (the Secret Service's keyring, which a
/// kiosk's automatic login leaves locked). While the store is locked the broker answers everything
/// that needs no token (device mode, accounts, sign-out, signals) and refuses token calls with
/// `StorageLocked`; once it opens, what it holds joins the state and tokens are served again,
/// without a restart.
extension Broker {
    /// Says that the token store is locked (`message`: what a person does to unlock it), or that
    /// it is open again (nil) with the tokens the broker already holds. The store's owner logs the
    /// change, in the store's own words (the keyring's name, how to unlock it).
    public nonisolated func tokenStorageLocked(_ message: String?) {
        tokenStorageLock.withLock { $0 = message }
    }

    /// Whether token calls are refused now because the token store is locked.
    public nonisolated var tokenStorageIsLocked: Bool { tokenStorageLock.withLock { $0 != nil } }

    /// The token store opened and its tokens were read: `adopt` (run on the actor, so that no
    /// change is written between it and the commit) adds them to the state, whose changes the
    /// store may have seen while locked (a sign-out); then token calls are served again.
    /// The state is written even when `adopt` changes nothing: the store then drops what it held
    /// for sign-ins that ended meanwhile. When `adopt` throws, the store stays locked and the
    /// error is rethrown.
    public func tokenStorageOpened(adopting adopt: (BrokerState) throws -> BrokerState) throws {
        try commit(try adopt(state))
        tokenStorageLocked(nil)
    }

    /// Refuses a sign-in or token call that cannot be served now: no provider is configured, or
    /// the token store is locked.
    nonisolated func checkTokenStorage() throws(BrokerFailure) {
        if let remedy = configuration.providerNotConfigured { throw BrokerFailure(.notConfigured, remedy) }
        if let message = tokenStorageLock.withLock({ $0 }) { throw BrokerFailure(.storageLocked, message) }
    }
}
