import BrokerCore
import Testing

@Suite("Broker core: single sign-on between apps")
struct SingleSignOnTests {
    @Test func everyMechanismHasItsPlaceInTheTryingOrder() {
        #expect(SingleSignOnMechanism.tryingOrder.count == SingleSignOnMechanism.allCases.count)
        #expect(Set(SingleSignOnMechanism.tryingOrder) == Set(SingleSignOnMechanism.allCases))
    }

    let alice = ScriptedProvider.account("alice@contoso.example")

    @Test(arguments: [
        (SingleSignOnMechanism.nativeSSO, "native-sso:calendar"),
        (.familyRefreshToken, "family-refresh-token:calendar"),
        (.tokenExchange, "token-exchange:calendar"),
    ])
    func anotherAppGetsTokensOfItsOwn(mechanism: SingleSignOnMechanism, expected: String) async throws {
        let h = Harness()
        h.provider.offer(mechanism)
        _ = try await h.signIn(client: "mail")
        let token = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["Calendars.Read"], accountId: "",
            forceRefresh: false)
        #expect(token.account == alice)
        #expect(h.provider.exchanges == [expected])
        // Issued to calendar: its own refresh token, never mail's.
        let calendar = try #require(h.broker.snapshot.clients["calendar"])
        #expect(calendar.refreshToken?.hasSuffix("|calendar") == true)
        #expect(calendar.account == alice)
        // Cached from now on, and refreshed with its own refresh token.
        _ = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["Calendars.Read"], accountId: "", forceRefresh: false)
        _ = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["Calendars.Read"], accountId: "", forceRefresh: true)
        #expect(h.provider.exchanges == [expected])
        #expect(h.provider.refreshCalls == 1)
    }

    @Test func theDeviceInformationSaysWhatTheProviderOffers() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        #expect(h.broker.deviceInformation().singleSignOn == nil)
        _ = try await h.signIn(client: "mail")
        _ = try await h.broker.acquireTokenSilent(clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        #expect(h.broker.deviceInformation().singleSignOn == [.nativeSSO])
    }

    @Test func aProviderWithoutSingleSignOnRequiresInteraction() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        let saves = h.store.saves
        let failure = await failure {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        }
        #expect(failure?.code == .interactionRequired)
        #expect(failure?.message.contains("offers no single sign-on between apps") == true)
        #expect(h.provider.exchanges.isEmpty)
        #expect(h.store.saves == saves)
    }

    @Test func aRefusalFallsThroughAndThenRequiresInteractionChangingNothing() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        h.provider.family = "1"
        h.provider.refusedClients = ["calendar"]
        _ = try await h.signIn(client: "mail")
        let before = h.broker.snapshot
        let failure = await failure {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        }
        #expect(failure?.code == .interactionRequired)
        #expect(failure?.message.contains("refused single sign-on") == true)
        #expect(h.provider.exchanges == ["native-sso:calendar", "family-refresh-token:calendar"])
        #expect(h.broker.snapshot == before)
    }

    @Test func signOutRevokesTheDeviceSecretAndEndsSingleSignOn() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        _ = try await h.signIn(client: "mail")
        let secret = try #require(h.broker.snapshot.singleSignOn[alice.identifier]?.deviceSecret?.secret)
        try await h.broker.signOut(clientId: "notes", accountId: "")
        #expect(h.provider.revoked.contains(secret))
        #expect(h.broker.snapshot.singleSignOn.isEmpty)
        let code = await failureCode {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        }
        #expect(code == .noAccount)
        // The next user's sign-in is the one other apps get tokens of.
        _ = try await h.signIn("bob@contoso.example", client: "notes")
        let token = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        #expect(token.account.username == "bob@contoso.example")
        #expect(h.broker.snapshot.clients["calendar"]?.refreshToken?.contains("bob@") == true)
    }

    @Test func signingInAgainReplacesAndRevokesTheDeviceSecret() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        _ = try await h.signIn(client: "mail")
        let first = try #require(h.broker.snapshot.singleSignOn[alice.identifier]?.deviceSecret)
        _ = try await h.signIn(client: "calendar")
        let second = try #require(h.broker.snapshot.singleSignOn[alice.identifier]?.deviceSecret)
        #expect(second != first)
        #expect(h.provider.revoked == [first.secret])
        #expect(h.broker.snapshot.singleSignOn[alice.identifier]?.anchorClientId == "mail")
    }

    @Test func concurrentFirstCallsMakeOneExchangePerApp() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        _ = try await h.signIn(client: "mail")
        let apps = (1...10).map { "app-\($0)" }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for app in apps {
                for _ in 0..<3 {
                    group.addTask {
                        _ = try await h.broker.acquireTokenSilent(
                            clientId: app, scopes: ["User.Read"], accountId: "", forceRefresh: false)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(h.provider.exchanges.sorted() == apps.map { "native-sso:\($0)" }.sorted())
    }

    @Test func aSignOutDuringTheExchangeLeavesNoTokens() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        _ = try await h.signIn(client: "mail")
        let (gate, open) = AsyncStream<Void>.makeStream()
        h.provider.exchangeGate = gate
        let pending = Task {
            try await h.broker.acquireTokenSilent(clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        }
        while h.provider.exchanges.isEmpty { await Task.yield() }
        try await h.broker.signOut(clientId: "mail", accountId: "")
        open.yield()
        let code = await failureCode { _ = try await pending.value }
        #expect(code == .noAccount)
        #expect(h.broker.snapshot.clients["calendar"]?.refreshToken == nil)
    }

    @Test func defaultModeServesAppsThatAskForTheAccount() async throws {
        let h = Harness(mode: .default)
        h.provider.offer(.tokenExchange)
        _ = try await h.signIn(client: "mail")
        #expect(try h.broker.accounts(clientId: "calendar") == [alice])
        let token = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: [], accountId: alice.identifier,
            forceRefresh: false)
        #expect(token.account == alice)
        #expect(h.provider.exchanges == ["token-exchange:calendar"])
        // The app that signed in signs out: single sign-on from its sign-in ends, other apps keep theirs.
        try await h.broker.signOut(clientId: "mail", accountId: "")
        #expect(h.broker.snapshot.singleSignOn.isEmpty)
        #expect(try h.broker.accounts(clientId: "notes").isEmpty)
        _ = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: [], accountId: alice.identifier, forceRefresh: true)
    }

    @Test func aRestartKeepsTheGrant() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        _ = try await h.signIn(client: "mail")
        let saved = try #require(h.store.saved)
        #expect(saved.singleSignOn[alice.identifier]?.deviceSecret?.secret.hasSuffix("|alice@contoso.example") == true)
        let restarted = Harness(state: saved)
        restarted.provider.offer(.nativeSSO)
        _ = try await restarted.broker.acquireTokenSilent(
            clientId: "calendar", scopes: [], accountId: "", forceRefresh: false)
        #expect(restarted.provider.exchanges == ["native-sso:calendar"])
    }

    @Test func interactiveSignInSuggestsTheDevicesAccount() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        _ = await failureCode {
            _ = try await h.broker.acquireTokenInteractive(
                clientId: "calendar", scopes: [], prompt: .selectAccount, loginHint: nil,
                flowId: "", owner: ":1.1")
        }
        #expect(h.provider.interactiveRequests.map(\.loginHint) == ["alice@contoso.example"])
        // Shared mode asks the provider to authenticate the person now, whatever the app asked.
        #expect(h.provider.interactiveRequests.map(\.prompt) == [.login])
    }
}

/// The `BrokerFailure` thrown by `body`, or nil when it succeeded.
func failure(_ body: () async throws -> Void) async -> BrokerFailure? {
    do {
        try await body()
        return nil
    } catch {
        return error as? BrokerFailure
    }
}
