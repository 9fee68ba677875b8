import BrokerCore
import Testing

@Suite("Broker core: tokens")
struct TokenTests {
    @Test func cachedTokenIsReturnedUntilTheMargin() async throws {
        let h = Harness()
        let first = try await h.signIn()
        let cached = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        #expect(cached.accessToken == first.accessToken)
        #expect(h.provider.refreshCalls == 0)
        h.clock.advance(3600 - 299)
        let refreshed = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: first.account.identifier, forceRefresh: false)
        #expect(refreshed.accessToken != first.accessToken)
        #expect(h.provider.refreshCalls == 1)
        // The rotated refresh token is the one kept.
        let state = h.broker.snapshot
        #expect(state.clients["mail"]?.refreshToken?.hasPrefix("rt-2|") == true)
    }

    @Test func forceRefreshSkipsTheCache() async throws {
        let h = Harness()
        let first = try await h.signIn()
        let again = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["user.read"], accountId: "", forceRefresh: true)
        #expect(again.accessToken != first.accessToken)
        #expect(h.provider.refreshCalls == 1)
    }

    @Test func rejectedRefreshTokenMeansInteractionRequired() async throws {
        let h = Harness()
        _ = try await h.signIn()
        h.provider.rejectRefresh = true
        let code = await failureCode {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: true)
        }
        #expect(code == .interactionRequired)
        // The refresh token is gone, the account stays signed in.
        #expect(h.broker.snapshot.clients["mail"]?.refreshToken == nil)
        #expect(h.broker.deviceAccount != nil)
    }

    @Test func scopesBeyondTheGrantNeedInteractionButKeepTheRefreshToken() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let refreshToken = h.broker.snapshot.clients["mail"]?.refreshToken
        h.provider.ungrantedScopes = ["Mail.Read"]
        let code = await failureCode {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["Mail.Read"], accountId: "", forceRefresh: false)
        }
        #expect(code == .interactionRequired)
        #expect(h.broker.snapshot.clients["mail"]?.refreshToken == refreshToken)
        // The scopes it was granted still refresh.
        _ = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: true)
    }

    @Test func tokensAreNeverHandedToAnotherClientId() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        let code = await failureCode {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "calendar", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        }
        #expect(code == .interactionRequired)
    }

    @Test func concurrentSilentRequestsShareOneRefresh() async throws {
        let h = Harness()
        _ = try await h.signIn()
        h.clock.advance(3600)
        let (gate, open) = AsyncStream<Void>.makeStream()
        h.provider.refreshGate = gate
        async let a = h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        async let b = h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read", "openid"], accountId: "", forceRefresh: false)
        while h.provider.refreshCalls == 0 { await Task.yield() }
        open.yield()
        open.finish()
        let (first, second) = try await (a, b)
        #expect(first.accessToken == second.accessToken)
        #expect(h.provider.refreshCalls == 1)
    }

    @Test func aRefreshThatStraddlesASignOutIsDiscarded() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let (gate, open) = AsyncStream<Void>.makeStream()
        h.provider.refreshGate = gate
        let refreshed = Task {
            try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: true)
        }
        while h.provider.refreshCalls == 0 { await Task.yield() }
        try await h.broker.signOut(clientId: "calendar", accountId: "")
        open.yield()
        open.finish()
        let code = await failureCode { _ = try await refreshed.value }
        #expect(code == .noAccount)
        #expect(h.broker.snapshot.clients["mail"]?.refreshToken == nil)
    }

    @Test func scopesAreNormalized() {
        #expect(
            Scopes(["User.Read", "OpenID", "user.read", "User.Read"]).values
                == ["User.Read", "offline_access", "openid", "profile", "user.read"])
        #expect(Scopes([]).joined == "offline_access openid profile")
        #expect(Scopes(["b", "a"]) == Scopes(["a", "b", "PROFILE"]))
    }
}
