import BrokerCore
import Testing

/// Sign-out after inactivity, as the core decides it: the warning and its deadline, activity
/// cancelling it, and a restart during the warning, which must neither forget the deadline nor
/// extend the session (the bus-level tests, with a real idle monitor, cannot stop brokerd at a
/// chosen moment of the warning).
@Suite("Broker core: the inactivity deadline")
struct IdleDeadlineTests {
    static let idle = IdleSignOut(after: 300, warning: 60)
    static let alice = ScriptedProvider.account("alice@contoso.example")

    @Test func aWarningIsWrittenAndActivityCancelsIt() async throws {
        let h = Harness(idleSignOut: Self.idle)
        _ = try await h.signIn()
        await h.broker.personInactive()
        let deadline = h.clock.now() + 60
        #expect(h.warnings.warnings == [.pending(cause: .idle, deadline: deadline)])
        #expect(h.store.saved?.signOutDeadline == deadline)
        // A second inactivity report during the warning does not move the deadline.
        h.clock.advance(10)
        await h.broker.personInactive()
        #expect(h.warnings.warnings.count == 1 && h.store.saved?.signOutDeadline == deadline)
        await h.broker.personActive()
        #expect(h.warnings.warnings.last == .cancelled(cause: .idle))
        #expect(h.store.saved?.signOutDeadline == nil)
        #expect(try await h.broker.currentAccount(clientId: "mail").current == Self.alice)
    }

    /// A sign-out during the warning ends it in the same change: one announcement, the warning's
    /// end first, so that brokerd tells apps of both properties at once.
    @Test func aSignOutDuringTheWarningEndsItInOneAnnouncement() async throws {
        let h = Harness(idleSignOut: Self.idle)
        _ = try await h.signIn()
        await h.broker.personInactive()
        _ = try await h.broker.signOut(clientId: "mail", accountId: "")
        let signedOut = DeviceAccountChange(current: nil, previous: Self.alice, reason: .signedOut, cause: .app)
        #expect(h.announcements.announcements.last == [.shiftWarning(.over), .accountChanged(signedOut)])
    }

    @Test func nobodySignedInHearsNoWarning() async {
        let h = Harness(idleSignOut: Self.idle)
        await h.broker.personInactive()
        #expect(h.warnings.warnings.isEmpty && h.store.saved?.signOutDeadline == nil)
    }

    /// The idle source says "inactive" once per quiet period. A sign-in that comes while the
    /// person is still inactive (a device code approved on a phone) is watched from the sign-in:
    /// after a quiet period without activity, the warning; with activity, none.
    @Test(arguments: [false, true])
    func aSignInWhileThePersonIsInactiveIsWatchedFromTheSignIn(activeAfterSignIn: Bool) async throws {
        let h = Harness(idleSignOut: IdleSignOut(after: 2, warning: 1))
        await h.broker.personInactive()
        _ = try await h.signIn()
        if activeAfterSignIn { await h.broker.personActive() }
        // The quiet period is a second of real time: waited for boundedly, then a little longer
        // for a warning that must not come.
        for _ in 0..<(activeAfterSignIn ? 150 : 300) where h.warnings.warnings.isEmpty {
            try await Task.sleep(for: .milliseconds(10))
        }
        if activeAfterSignIn {
            #expect(h.warnings.warnings.isEmpty)
        } else {
            #expect(h.warnings.warnings == [.pending(cause: .idle, deadline: h.clock.now() + 1)])
        }
    }

    /// A broker killed during the warning and started again before its deadline announces the
    /// same deadline (not a new full warning) and signs out when it comes.
    @Test func aRestartBeforeTheDeadlineKeepsIt() async throws {
        let clock = TestClock()
        let deadline = clock.now() + 1
        let h = Harness(
            state: Self.signedIn(deadline: deadline), idleSignOut: Self.idle, clock: clock)
        #expect(try await h.broker.resumeIdleDeadline() == nil)
        #expect(h.warnings.warnings == [.pending(cause: .idle, deadline: deadline)])
        #expect(h.changes.changes.isEmpty)
        // The timer is armed for the deadline: a second of real time at most, waited for boundedly.
        for _ in 0..<500 where h.changes.changes.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        #expect(h.changes.changes.map(\.cause) == [.idle])
        #expect(h.store.saved?.current == nil && h.store.saved?.signOutDeadline == nil)
    }

    @Test func aRestartAfterTheDeadlineSignsOutAtOnce() async throws {
        let clock = TestClock()
        let h = Harness(state: Self.signedIn(deadline: clock.now() - 5), idleSignOut: Self.idle, clock: clock)
        let signOut = try await h.broker.resumeIdleDeadline()
        let outcome = await signOut?.value
        #expect(outcome?.cause == .idle)
        #expect(h.changes.changes.map(\.cause) == [.idle])
        #expect(h.store.saved?.current == nil)
    }

    /// The setting was turned off, or nobody is signed in any more: the deadline is forgotten.
    @Test(arguments: [true, false])
    func aDeadlineThatNoLongerAppliesIsForgotten(settingOff: Bool) async throws {
        let clock = TestClock()
        var state = Self.signedIn(deadline: clock.now() + 30)
        if !settingOff { state.current = nil }
        let h = Harness(state: state, idleSignOut: settingOff ? nil : Self.idle, clock: clock)
        #expect(try await h.broker.resumeIdleDeadline() == nil)
        #expect(h.warnings.warnings.isEmpty && h.changes.changes.isEmpty)
        #expect(h.store.saved?.signOutDeadline == nil)
    }

    static func signedIn(deadline: Int64) -> BrokerState {
        BrokerState(
            deviceId: "device-1", current: alice,
            clients: ["mail": ClientRecord(lastSeen: alice, account: alice, refreshToken: "rt-1|alice|mail")],
            signOutDeadline: deadline)
    }
}
