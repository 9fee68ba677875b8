import BrokerAPI
import Logging

/// Every way the device's sign-in ends: an app's SignOut, the end of a shift, a reboot.
extension Broker {

    /// Shared mode: signs the whole device out (every app's tokens go, refresh tokens are
    /// revoked where the provider offers it, `AccountChanged` goes out). Default mode: removes
    /// the account for this clientId only. The provider's browser session is ended as the
    /// configuration's ``BrowserSignOutPolicy`` says, given `fromBrowser` (what the app asked).
    /// The account is signed out once the state is written; what the provider could not do
    /// afterwards (revocation, ending the browser session) is reported in the outcome, not thrown.
    @discardableResult
    public func signOut(clientId: String, accountId: String, fromBrowser: Bool = false) async throws(BrokerFailure)
        -> SignOutOutcome
    {
        try checkClient(clientId)
        try InputRules.accountId(accountId)
        let account = try signedInAccount(clientId: clientId, accountId: accountId)
        return try await end(account, for: clientId, fromBrowser: fromBrowser, cause: .app)
    }

    /// Ends the shift (shared mode) without an app asking: inactivity, the screen lock, a
    /// reboot, the provider. The same sign-out as ``signOut(clientId:accountId:fromBrowser:)``,
    /// with its cause. Nil when nobody is signed in (or in default mode, where there is no shift).
    @discardableResult
    public func endShift(cause: SignOutCause) async throws(BrokerFailure) -> SignOutOutcome? {
        guard configuration.deviceMode == .shared, let account = state.current else { return nil }
        return try await end(account, for: shiftClientId(for: account), fromBrowser: false, cause: cause)
    }

    /// At start, before anyone is served: with `signOutAfterReboot`, a sign-in made in another
    /// boot ends (cause `reboot`), written at once; what is left to do at the provider and on the
    /// device runs in the returned task. A sign-in whose boot is unknown (made by a broker that
    /// did not record it) counts as another boot's. A restart of brokerd alone keeps the sign-in.
    public func endShiftIfRebooted() throws(BrokerFailure) -> Task<SignOutOutcome, Never>? {
        guard configuration.signOutAfterReboot, configuration.deviceMode == .shared, let account = state.current,
            let boot = configuration.bootId, state.signedInBoot != boot
        else { return nil }
        let clientId = shiftClientId(for: account)
        let ended = try write(end: account, for: clientId, cause: .reboot, handledEvent: nil)
        return Task { await self.followUp(ended, fromBrowser: false) }
    }

    /// The app whose sign-in the device's is (its ID token is the end-session page's hint).
    func shiftClientId(for account: Account) -> String {
        state.singleSignOn[account.identifier]?.anchorClientId
            ?? state.clients.keys.sorted().first { state.clients[$0]?.refreshToken != nil } ?? ""
    }

    /// Every way the device's sign-in ends comes here: the state written (the revocations and
    /// the clean-up owed with it) before `AccountChanged`, then the clean-up list, the
    /// revocations and the browser policy, each reported in the outcome, none undoing the sign-out.
    func end(
        _ account: Account, for clientId: String, fromBrowser: Bool, cause: SignOutCause, handledEvent: String? = nil
    ) async throws(BrokerFailure) -> SignOutOutcome {
        await followUp(
            try write(end: account, for: clientId, cause: cause, handledEvent: handledEvent), fromBrowser: fromBrowser)
    }

    /// A sign-in ended and written, with what is left to do at the provider and on the device.
    struct EndedSignIn: Sendable {
        var account: Account
        var clientId: String
        var cause: SignOutCause
        var revoke: [PendingRevocation]
        var idTokenHint: String?
    }

    /// The sign-out's change of state: written and announced before anything else happens.
    private func write(end account: Account, for clientId: String, cause: SignOutCause, handledEvent: String?)
        throws(BrokerFailure) -> EndedSignIn
    {
        var next = state
        if let handledEvent { next.handledEvents = Self.noting(handledEvent, in: next.handledEvents) }
        var revoke: [PendingRevocation] = []
        let affected = configuration.deviceMode == .shared ? Array(next.clients.keys) : [clientId]
        let idTokenHint =
            (next.clients[clientId].map { [$0] } ?? []).flatMap { $0.accessTokens.values }.compactMap(\.idToken).first
            ?? affected.lazy.compactMap { next.clients[$0] }.flatMap { $0.accessTokens.values }.compactMap(\.idToken)
            .first
        for id in affected {
            if let token = next.clients[id]?.refreshToken {
                revoke.append(.init(clientId: id, token: .refreshToken(token)))
            }
            next.clients[id]?.dropTokens()
            next.clients[id]?.dropIfEmpty(in: &next, clientId: id)
        }
        // Single sign-on ends with the sign-in that made it: the device's (shared mode), or in
        // default mode this app's, so no app gets a token from it afterwards.
        for (identifier, grant) in next.singleSignOn
        where configuration.deviceMode == .shared || grant.anchorClientId == clientId {
            if let deviceSecret = grant.deviceSecret {
                revoke.append(.init(clientId: grant.anchorClientId, token: .deviceSecret(deviceSecret.secret)))
            }
            next.singleSignOn[identifier] = nil
        }
        if configuration.deviceMode == .shared {
            next.current = nil
            next.signedInBoot = nil
            next.signedInAt = nil
            next.signOutDeadline = nil
            // Owed with the sign-out: a broker killed before it is done does it at its next start.
            if cleaner.listsAnything { next.cleanUpOwed = true }
        }
        // Owed to the provider from the moment the sign-out is written: a crash or an outage
        // before the provider confirms leaves them pending, never forgotten.
        next.owe(revoke)
        // Default mode: the app's own account changed, which no other app sees, so no signal.
        try commit(
            next,
            announcing: configuration.deviceMode == .shared
                ? DeviceAccountChange(current: nil, previous: account, reason: .signedOut, cause: cause) : nil,
            endingWarning: state.signOutDeadline != nil)
        generation &+= 1
        if state.signOutDeadline == nil, let timer = idleDeadlineTimer {
            // A warning was on: it ends with this sign-out, whatever its cause.
            timer.cancel()
            idleDeadlineTimer = nil
        }
        logger.info(
            "signed out",
            metadata: [
                "clientId": "\(clientId)", "account": "\(account.identifier)",
                "mode": "\(configuration.deviceMode.rawValue)", "cause": "\(cause.rawValue)",
            ])
        return EndedSignIn(account: account, clientId: clientId, cause: cause, revoke: revoke, idTokenHint: idTokenHint)
    }

    /// What a written sign-out still does: the clean-up list first (before anything that may
    /// wait on the network, and before the next sign-in is accepted), then the revocations and
    /// the browser session.
    private func followUp(_ ended: EndedSignIn, fromBrowser: Bool) async -> SignOutOutcome {
        let (clientId, revoke, idTokenHint) = (ended.clientId, ended.revoke, ended.idTokenHint)
        var outcome = SignOutOutcome()
        outcome.cause = ended.cause
        if configuration.deviceMode == .shared, let report = await cleanUpOwed() {
            outcome.cleanedUp = report.removed
            outcome.notCleanedUp = report.failed
            outcome.cleanedUpCount = report.removedCount
            outcome.notCleanedUpCount = report.failedCount
            if report.failedCount > 0 {
                outcome.note("some of what the device clears after a sign-out could not be removed")
            }
        }
        for problem in await revokeOwed(revoke) {
            outcome.tokensRevoked = false
            outcome.note(problem)
        }
        if tokenStorageIsLocked {
            outcome.tokensRevoked = false
            outcome.note("the keyring is locked: the tokens it keeps are revoked once it is unlocked")
        }
        if configuration.browserSignOut.endsBrowserSession(appAsked: fromBrowser) {
            do {
                // Handing the page to the browser is all brokerd can know: whether the browser reached
                // it and the provider ended its session is never reported back, so `browserSessionEnded`
                // stays false.
                if try await provider.endBrowserSession(clientId: clientId, idTokenHint: idTokenHint) == .done {
                    outcome.browserLogoutOpened = true
                } else {
                    outcome.note("the provider offers no end_session_endpoint; its browser session stays")
                }
            } catch {
                // The person reads what it means for them; how the desktop failed (a portal, xdg-open,
                // its exit status) is brokerd's log's, for whoever maintains the device.
                logger.notice(
                    "sign-out: the provider's end-session page could not be opened",
                    metadata: ["clientId": "\(clientId)", "error": "\(Self.describe(error))"])
                outcome.note(browserSessionLeftOpen(error))
            }
        } else if fromBrowser {
            outcome.note("the administrator's browserSignOut is never: the provider's browser session stays")
        }
        for note in outcome.notes { logger.notice("sign-out: \(note)", metadata: ["clientId": "\(clientId)"]) }
        return outcome
    }

    /// The note of a browser session the sign-out could not end: why, in the person's terms, and
    /// what they can do. A failure of the provider's own says what it said; a desktop that could
    /// not open a page is only that.
    private nonisolated func browserSessionLeftOpen(_ error: any Error) -> String {
        let why =
            (error as? BrokerFailure)?.code == .browserUnavailable
            ? "no browser could open the provider's sign-out page on this device"
            : "the provider's sign-out page could not be reached (\(Self.describe(error)))"
        let next =
            configuration.deviceMode == .shared
            ? "; the next person signing in here is asked for their own credentials all the same" : ""
        return "the provider's browser session may still be open, as \(why): close any browser window signed in "
            + "to the provider, or it ends when the provider's session expires\(next)"
    }

    /// Does the clean-up a sign-out owes (the administrator's `clearOnSignOut`), or waits for the
    /// one running; nil when none is owed. Called by the sign-out, at start before anyone is
    /// served (a broker killed before it finished), and by a sign-in before it is adopted, so the
    /// clean-up never meets the next person's files. What it owed is cleared once it is done.
    @discardableResult
    public func cleanUpOwed() async -> CleanUpReport? {
        if let cleaning { return await cleaning.value }
        // Never while someone is signed in (a flag a failed write left set): their files are not
        // the last person's.
        guard state.cleanUpOwed, state.current == nil else { return nil }
        let cleaner = self.cleaner
        let task = Task { () -> CleanUpReport in
            let report = await cleaner.clean()
            self.cleanUpDone()
            return report
        }
        cleaning = task
        return await task.value
    }

    /// The owed clean-up is done: no longer owed, in the state too (a failure to write it only
    /// means the next start does it again).
    private func cleanUpDone() {
        cleaning = nil
        guard state.cleanUpOwed else { return }
        var next = state
        next.cleanUpOwed = false
        do { try commit(next) } catch {
            logger.warning(
                "the clean-up after the sign-out is done, but that could not be written; the next start does it again",
                metadata: ["error": "\(error.message)"])
        }
    }
}
