import BrokerCore
import Testing

/// An app's grant bounds what its refresh token gives: scopes beyond it come through single
/// sign-on from the device's sign-in where the provider allows, and otherwise the error names the
/// call and the scopes. The administrator's default scopes widen every sign-in up front.
@Suite("Broker core: scopes beyond an app's grant, and default scopes")
struct ScopeRuleTests {
    let alice = ScriptedProvider.account("alice@contoso.example")

    /// Waits (bounded) until the provider was asked to revoke `token`.
    static func revoked(_ token: String, by provider: ScriptedProvider) async -> Bool {
        for _ in 0..<10_000 {
            if provider.revoked.contains(token) { return true }
            await Task.yield()
        }
        return false
    }

    @Test(
        "another app's wider scopes come through each mechanism, with a refresh token of their own",
        arguments: [
            (SingleSignOnMechanism.nativeSSO, "native-sso:calendar"),
            (.familyRefreshToken, "family-refresh-token:calendar"),
            (.tokenExchange, "token-exchange:calendar"),
        ])
    func widerScopesForAnotherApp(mechanism: SingleSignOnMechanism, expected: String) async throws {
        let h = Harness()
        h.provider.offer(mechanism)
        _ = try await h.signIn(client: "mail")
        _ = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        let narrow = try #require(h.broker.snapshot.clients["calendar"]?.refreshToken)
        h.provider.ungrantedScopes = ["Mail.Read"]

        let wide = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["Mail.Read"], accountId: "", forceRefresh: false)
        #expect(wide.scopes.covers(Scopes(["Mail.Read"])))
        #expect(h.provider.refreshCalls == 1, "the refused refresh, then single sign-on")
        #expect(h.provider.exchanges == [expected, expected])
        let adopted = try #require(h.broker.snapshot.clients["calendar"]?.refreshToken)
        #expect(adopted != narrow && adopted.hasSuffix("|calendar"))
        // The replaced token is revoked, except in a family, whose tokens end together.
        if mechanism == .familyRefreshToken {
            #expect(h.broker.snapshot.pendingRevocations.isEmpty)
            #expect(!h.provider.revoked.contains(narrow))
        } else {
            #expect(await Self.revoked(narrow, by: h.provider))
        }
        // The token for the first scopes is still served from the cache.
        _ = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        #expect(h.provider.refreshCalls == 1)
    }

    @Test(
        "the app that signed the device in widens its own grant through Native SSO or token exchange",
        arguments: [(SingleSignOnMechanism.nativeSSO, "native-sso:mail"), (.tokenExchange, "token-exchange:mail")])
    func widerScopesForTheAnchor(mechanism: SingleSignOnMechanism, expected: String) async throws {
        let h = Harness()
        h.provider.offer(mechanism)
        _ = try await h.signIn(client: "mail")
        h.provider.ungrantedScopes = ["Mail.Read"]
        let wide = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read", "Mail.Read"], accountId: "", forceRefresh: false)
        #expect(wide.scopes.covers(Scopes(["User.Read", "Mail.Read"])))
        #expect(h.provider.exchanges == [expected])
        #expect(h.broker.snapshot.singleSignOn[alice.identifier]?.anchorClientId == "mail")
    }

    @Test func theAnchorsOwnFamilyTokenCannotWidenItsGrant() async throws {
        let h = Harness()
        h.provider.offer(.familyRefreshToken)
        _ = try await h.signIn(client: "mail")
        let before = h.broker.snapshot
        h.provider.ungrantedScopes = ["Mail.Read"]
        let refused = await failure {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["Mail.Read"], accountId: "", forceRefresh: false)
        }
        #expect(refused?.code == .interactionRequired)
        let message = refused?.message ?? ""
        #expect(message.contains("family-refresh-token: this app's refresh token is the family's"), "\(message)")
        #expect(
            message.hasPrefix(
                "the provider gives scopes Mail.Read only with the user's consent; sign in again with them: "
                    + "AcquireTokenInteractive (or SignInWithPassword/StartSignIn) with scopes User.Read Mail.Read ("),
            "\(message)")
        #expect(h.provider.exchanges.isEmpty)
        #expect(h.broker.snapshot == before)
    }

    @Test func withoutSingleSignOnTheErrorNamesTheCallAndTheScopes() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        let refreshToken = h.broker.snapshot.clients["mail"]?.refreshToken
        h.provider.ungrantedScopes = ["Mail.Read"]
        let refused = await failure {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["Mail.Read"], accountId: "", forceRefresh: false)
        }
        #expect(refused?.code == .interactionRequired)
        #expect(
            refused?.message
                == "the provider gives scopes Mail.Read only with the user's consent; sign in again with them: "
                + "AcquireTokenInteractive (or SignInWithPassword/StartSignIn) with scopes User.Read Mail.Read "
                + "(single sign-on could not get them without a person: the identity provider offers no single "
                + "sign-on between apps; the refresh was refused: not consented)")
        // The refresh token stays, and serves the scopes it has.
        #expect(h.broker.snapshot.clients["mail"]?.refreshToken == refreshToken)
        _ = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: true)
    }

    @Test func everySignInAsksForTheClientsDefaultScopes() async throws {
        let h = Harness(defaultScopes: ["mail": ["User.Read", "Mail.Read"], "calendar": ["Calendars.Read"]])
        h.provider.offer(.nativeSSO)
        let signedIn = try await h.signIn(client: "mail", scopes: [])
        #expect(signedIn.scopes == Scopes(["User.Read", "Mail.Read"]))
        // A silent call for them is the cache's: no refresh.
        let silent = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["Mail.Read", "User.Read"], accountId: "", forceRefresh: false)
        #expect(silent.accessToken == signedIn.accessToken)
        #expect(h.provider.refreshCalls == 0)
        // Single sign-on is calendar's sign-in: it asks for calendar's default scopes too.
        let calendar = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        #expect(calendar.scopes == Scopes(["User.Read", "Calendars.Read"]))
        // Other clients are not affected.
        #expect(try await h.signIn(client: "notes", scopes: []).scopes == Scopes([]))
    }
}
