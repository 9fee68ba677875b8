/// Sign-out after inactivity (shared mode, `idleSignOutSeconds`): the desktop's idle source tells
/// the core when the person has been inactive until the warning is due and when they are active
/// again; the core decides. The warning (`SignOutPending`, the `SignOutDeadline` property) lasts
/// `idleWarningSeconds`; activity cancels it (`SignOutCancelled`); at its deadline the device is
/// signed out through the one sign-out path (cause `idle`). The deadline is written with the
/// state, so a broker killed during the warning neither forgets it nor extends the session.
/// A timer is armed for the deadline; nothing is polled.
extension Broker {
    /// When a warning in progress signs the device out (unix seconds), or nil.
    public nonisolated var pendingSignOutDeadline: Int64? { state.signOutDeadline }

    /// The person has been inactive for the quiet part (`idleSignOutSeconds - idleWarningSeconds`):
    /// the warning starts, unless nobody is signed in or one is on already.
    public func personInactive() {
        guard let idle = configuration.idleSignOut, configuration.deviceMode == .shared else { return }
        // The idle source says this once per quiet period: a sign-in before the person's next
        // activity (after this warning's sign-out, or with nobody signed in now) must not go
        // unwatched until then.
        personIdle = true
        guard state.current != nil, state.signOutDeadline == nil else { return }
        // The next whole second after the full warning: the person gets at least what was promised.
        let deadline = (clock.nowMicroseconds() + idle.warning * 1_000_000 + 999_999) / 1_000_000
        var next = state
        next.signOutDeadline = deadline
        do { try commit(next) } catch {
            // Unwritten, the warning would not survive a restart; it still runs in this one.
            logger.warning("could not keep the sign-out deadline", metadata: ["error": "\(error)"])
        }
        logger.notice("signing out after inactivity unless the person is active", metadata: ["in": "\(idle.warning) s"])
        announce(.shiftWarning(.pending(cause: .idle, deadline: deadline)))
        armIdleDeadline(deadline)
    }

    /// The person is active: a warning on is cancelled.
    public func personActive() {
        personIdle = false
        idleQuietTimer?.cancel()
        idleQuietTimer = nil
        guard state.signOutDeadline != nil else { return }
        idleDeadlineTimer?.cancel()
        idleDeadlineTimer = nil
        var next = state
        next.signOutDeadline = nil
        do { try commit(next) } catch {
            logger.warning("could not forget the sign-out deadline", metadata: ["error": "\(error)"])
        }
        logger.notice("the person is active: no sign-out after inactivity")
        announce(.shiftWarning(.cancelled(cause: .idle)))
    }

    /// At start: a deadline a previous run wrote is kept (re-armed, announced) or, when passed,
    /// the sign-out it promised happens now. Returns the sign-out's remaining work, if any.
    public func resumeIdleDeadline() throws(BrokerFailure) -> Task<SignOutOutcome?, Never>? {
        guard let deadline = state.signOutDeadline else { return nil }
        guard configuration.idleSignOut != nil, state.current != nil else {
            var next = state
            next.signOutDeadline = nil
            try commit(next)
            return nil
        }
        if clock.now() >= deadline {
            return Task { try? await self.endShift(cause: .idle) }
        }
        announce(.shiftWarning(.pending(cause: .idle, deadline: deadline)))
        armIdleDeadline(deadline)
        return nil
    }

    /// A sign-in while the person is inactive (no activity since the idle source said so): the
    /// quiet period counts from the sign-in, and the warning follows unless the person is active.
    func signedInWhilePersonIdle() {
        guard personIdle, let idle = configuration.idleSignOut, configuration.deviceMode == .shared else { return }
        idleQuietTimer?.cancel()
        idleQuietTimer = Task {
            do { try await Task.sleep(for: .seconds(idle.quiet)) } catch { return }
            self.quietPeriodAfterSignInEnded()
        }
    }

    private func quietPeriodAfterSignInEnded() {
        idleQuietTimer = nil
        guard personIdle else { return }
        personInactive()
    }

    private func armIdleDeadline(_ deadline: Int64) {
        idleDeadlineTimer?.cancel()
        // To the microsecond: the sign-out comes at the second announced, not up to one after it.
        let wait = max(0, deadline * 1_000_000 - clock.nowMicroseconds())
        idleDeadlineTimer = Task {
            do { try await Task.sleep(for: .microseconds(wait)) } catch { return }
            await self.idleDeadlineReached(deadline)
        }
    }

    private func idleDeadlineReached(_ deadline: Int64) async {
        guard state.signOutDeadline == deadline else { return }
        // This task is the timer: the sign-out must not cancel it under itself.
        idleDeadlineTimer = nil
        do {
            try await endShift(cause: .idle)
        } catch {
            logger.error(
                "the inactivity deadline passed, but the device could not be signed out",
                metadata: ["error": "\(error)"])
        }
    }
}
