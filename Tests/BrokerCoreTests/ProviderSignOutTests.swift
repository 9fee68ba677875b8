import BrokerCore
import Testing

@Suite("Broker core: the provider ends a session")
struct ProviderSignOutTests {
    let alice = ScriptedProvider.account("alice@contoso.example")

    @Test func aSubjectMatchesByNameOrIdWithinItsTenant() {
        #expect(EventSubject(emails: ["ALICE@contoso.example"]).matches(alice))
        #expect(EventSubject(userIds: ["oid-alice"]).matches(alice))
        #expect(EventSubject(userIds: ["oid-alice.tenant"]).matches(alice))
        #expect(!EventSubject(userIds: ["oid-alice"], tenant: "another").matches(alice))
        #expect(!EventSubject(emails: ["bob@contoso.example"], userIds: ["oid-al"]).matches(alice))
        #expect(!EventSubject(userIds: [""]).matches(alice))
    }

    @Test func theDevicesAccountIsSignedOutWithCauseProvider() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let outcome = await h.broker.providerEnded(
            .sessionRevoked, for: EventSubject(emails: [alice.username]), at: h.clock.now())
        #expect(outcome == .signedOut)
        #expect(h.store.saved?.current == nil)
        #expect(h.changes.changes.last?.cause == .provider)
        #expect(h.store.saved?.signedInAt == nil)
    }

    @Test func anEventOlderThanTheSignInChangesNothing() async throws {
        let h = Harness()
        let before = h.clock.now()
        h.clock.advance(3600)
        _ = try await h.signIn()
        #expect(h.store.saved?.signedInAt == h.clock.now())
        let outcome = await h.broker.providerEnded(
            .sessionRevoked, for: EventSubject(emails: [alice.username]), at: before)
        #expect(outcome == .olderThanSignIn)
        #expect(h.store.saved?.current == alice)
        // Within the clock skew allowed, it may be about this very sign-in.
        let recent = await h.broker.providerEnded(
            .credentialChange, for: EventSubject(emails: [alice.username]), at: h.clock.now() - 30)
        #expect(recent == .signedOut)
    }

    @Test func anEventActedOnIsRememberedWithTheSignOutAndChangesNothingWhenItComesAgain() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let first = await h.broker.providerEnded(
            .sessionRevoked, for: EventSubject(emails: [alice.username]), at: h.clock.now(), eventId: "jti-1")
        #expect(first == .signedOut)
        // In the sign-out's own write: a brokerd stopped after it remembers the event.
        #expect(h.store.saved?.current == nil && h.store.saved?.handledEvents == ["jti-1"])
        // The person signs in again 15 s later; the same event, delivered again within the skew.
        h.clock.advance(15)
        _ = try await h.signIn()
        let again = await h.broker.providerEnded(
            .sessionRevoked, for: EventSubject(emails: [alice.username]), at: h.clock.now() - 15, eventId: "jti-1")
        #expect(again == .handledAlready)
        #expect(h.store.saved?.current == alice)
        // Events that changed nothing are remembered too, and only the newest are kept.
        for index in 0..<100 {
            _ = await h.broker.providerEnded(
                .sessionRevoked, for: EventSubject(emails: ["bob@contoso.example"]), at: nil, eventId: "bob-\(index)")
        }
        #expect(h.store.saved?.handledEvents.count == 64 && h.store.saved?.handledEvents.last == "bob-99")
    }

    @Test func anotherAccountChangesNothing() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let outcome = await h.broker.providerEnded(
            .accountDisabled, for: EventSubject(emails: ["bob@contoso.example"]), at: nil)
        #expect(outcome == .notHere)
        #expect(h.store.saved?.current == alice)
    }

    @Test func defaultModeDropsTheAppsTokensOfThatAccountOnly() async throws {
        let h = Harness(mode: .default)
        _ = try await h.signIn(client: "mail")
        _ = try await h.signIn("bob@contoso.example", client: "calendar")
        let outcome = await h.broker.providerEnded(
            .sessionRevoked, for: EventSubject(userIds: ["oid-alice"]), at: nil)
        #expect(outcome == .forgotten(apps: 1))
        #expect(h.store.saved?.clients["mail"]?.refreshToken == nil)
        #expect(h.store.saved?.clients["calendar"]?.refreshToken != nil)
    }

    @Test func theSessionCheckSignsOutOnlyWhenTheGrantEnded() async throws {
        let h = Harness()
        _ = try await h.signIn()
        #expect(await h.broker.checkDeviceSession() == .alive)
        h.provider.refreshFailure = BrokerFailure(.serverUnavailable, "down")
        guard case .unknown = await h.broker.checkDeviceSession() else {
            Issue.record("an outage was taken for an answer")
            return
        }
        #expect(h.store.saved?.current == alice)
        h.provider.refreshFailure = BrokerFailure(.interactionRequired, "revoked", grantEnded: true)
        #expect(await h.broker.checkDeviceSession() == .ended)
        #expect(h.store.saved?.current == nil)
        #expect(await h.broker.checkDeviceSession() == .nothingToCheck)

        // A provider asking for the person (a policy, MFA) has not said the session ended.
        let asking = Harness()
        _ = try await asking.signIn()
        asking.provider.refreshFailure = BrokerFailure(.interactionRequired, "mfa needed")
        guard case .unknown = await asking.broker.checkDeviceSession() else {
            Issue.record("a request for the person was taken for an ended session")
            return
        }
        #expect(asking.store.saved?.current == alice)
    }
}

@Suite("Broker core: claims challenges")
struct ClaimsChallengeTests {
    @Test func claimsSkipTheCacheAndGoWithTheRefresh() async throws {
        let h = Harness()
        let first = try await h.signIn()
        let cached = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        #expect(cached.accessToken == first.accessToken)
        let calls = h.provider.refreshCalls
        let claims = #"{"access_token":{"nbf":{"essential":true,"value":"1"}}}"#
        _ = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false, claims: claims)
        #expect(h.provider.refreshCalls == calls + 1)
        #expect(h.provider.lastRefreshClaims == claims)
        h.provider.rejectRefresh = true
        let refused = await failureMessage {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false, claims: claims)
        }
        #expect(refused?.contains("AcquireTokenInteractive") == true, "\(refused ?? "")")
    }

    private func failureMessage(_ body: () async throws -> Void) async -> String? {
        do {
            try await body()
            return nil
        } catch {
            return "\(error)"
        }
    }
}
