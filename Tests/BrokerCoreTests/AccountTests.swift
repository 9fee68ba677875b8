import BrokerCore
import Testing

@Suite("Broker core: accounts, previous account, sign-out")
struct AccountTests {
    @Test func previousAccountIsWhatThisAppSawLastTime() async throws {
        let h = Harness()
        var seen = try await h.broker.currentAccount(clientId: "calendar")
        #expect(seen.current == nil && seen.previous == nil)
        _ = try await h.signIn(client: "mail")
        let alice = ScriptedProvider.account("alice@contoso.example")
        seen = try await h.broker.currentAccount(clientId: "calendar")
        #expect(seen.current == alice && seen.previous == nil)
        seen = try await h.broker.currentAccount(clientId: "calendar")
        #expect(seen.current == alice && seen.previous == alice)
        try await h.broker.signOut(clientId: "notes", accountId: "")
        seen = try await h.broker.currentAccount(clientId: "calendar")
        #expect(seen.current == nil && seen.previous == alice)
        seen = try await h.broker.currentAccount(clientId: "calendar")
        #expect(seen.current == nil && seen.previous == nil)
    }

    @Test func previousAccountSurvivesARestart() async throws {
        let h = Harness()
        _ = try await h.signIn()
        _ = try await h.broker.currentAccount(clientId: "calendar")
        try await h.broker.signOut(clientId: "mail", accountId: "")
        let saved: BrokerState = try #require(h.store.saved)
        let restarted = Harness(state: saved)
        let seen = try await restarted.broker.currentAccount(clientId: "calendar")
        #expect(seen.current == nil && seen.previous == ScriptedProvider.account("alice@contoso.example"))
    }

    @Test func unchangedQueriesWriteNothing() async throws {
        let h = Harness()
        _ = try await h.signIn()
        _ = try await h.broker.currentAccount(clientId: "mail")
        let saves = h.store.saves
        for _ in 0..<10 { _ = try await h.broker.currentAccount(clientId: "mail") }
        #expect(h.store.saves == saves)
    }

    @Test func sharedModeHoldsOneAccount() async throws {
        let h = Harness()
        _ = try await h.signIn("alice@contoso.example", client: "mail")
        let code = await failureCode { _ = try await h.signIn("bob@contoso.example", client: "calendar") }
        #expect(code == .accountAlreadySignedIn)
        // The same user again, from another app, is fine and changes nothing device-wide.
        _ = try await h.signIn("ALICE@contoso.example".lowercased(), client: "calendar")
        #expect(h.changes.changes.count == 1)
        #expect(h.provider.refreshCalls == 0)
    }

    @Test func signOutSignsEveryAppOutAndRevokesEveryRefreshToken() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        _ = try await h.signIn(client: "calendar")
        try await h.broker.signOut(clientId: "notes", accountId: "")
        let alice = ScriptedProvider.account("alice@contoso.example")
        #expect(
            h.changes.changes == [
                DeviceAccountChange(current: alice, previous: nil, reason: .signedIn),
                DeviceAccountChange(current: nil, previous: alice, reason: .signedOut, cause: .app),
            ])
        #expect(h.provider.revoked.count == 2)
        let state = h.broker.snapshot
        #expect(state.current == nil)
        #expect(state.clients.values.allSatisfy { $0.refreshToken == nil && $0.accessTokens.isEmpty })
        let code = await failureCode {
            _ = try await h.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        }
        #expect(code == .noAccount)
    }

    @Test func signOutOfAnotherAccountIdIsRefused() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let code = await failureCode { try await h.broker.signOut(clientId: "mail", accountId: "someone.else") }
        #expect(code == .noAccount)
        #expect(h.broker.deviceAccount != nil)
        let nobody = Harness()
        #expect(await failureCode { try await nobody.broker.signOut(clientId: "mail", accountId: "") } == .noAccount)
    }

    @Test("an accountId that is a username gets NoAccount saying the identifier is expected, and which")
    func usernameForAccountId() async throws {
        let h = Harness()
        _ = try await h.signIn()
        let identifier = try #require(h.broker.deviceAccount?.identifier)
        for given in ["alice@contoso.example", "ALICE@contoso.example", "bob@contoso.example"] {
            do throws(BrokerFailure) {
                _ = try await h.broker.acquireTokenSilent(
                    clientId: "mail", scopes: ["User.Read"], accountId: given, forceRefresh: false)
                Issue.record("\(given) was taken for an identifier")
            } catch let failure {
                #expect(failure.code == .noAccount)
                #expect(failure.message.contains("must be the account's identifier, not a username"), "\(failure)")
                #expect(failure.message.contains(identifier), "\(failure)")
            }
        }
        do throws(BrokerFailure) {
            try await h.broker.signOut(clientId: "mail", accountId: "someone.else")
            Issue.record("someone.else was signed out")
        } catch let failure {
            #expect(failure.code == .noAccount)
            #expect(failure.message.contains("no signed-in account has the identifier someone.else"), "\(failure)")
            #expect(failure.message.contains(identifier), "\(failure)")
        }
        #expect(h.broker.deviceAccount != nil)
    }

    @Test func defaultModeKeepsOneAccountPerApp() async throws {
        let h = Harness(mode: .default)
        _ = try await h.signIn("alice@contoso.example", client: "mail")
        _ = try await h.signIn("bob@contoso.example", client: "calendar")
        // Each app's own account first; then those another app signed in with, which single
        // sign-on could give it tokens for.
        #expect(
            try h.broker.accounts(clientId: "mail").map(\.username) == ["alice@contoso.example", "bob@contoso.example"])
        #expect(
            try h.broker.accounts(clientId: "calendar").map(\.username) == [
                "bob@contoso.example", "alice@contoso.example",
            ])
        try await h.broker.signOut(clientId: "mail", accountId: "")
        #expect(h.broker.snapshot.clients["mail"]?.account == nil)
        #expect(try h.broker.accounts(clientId: "mail").map(\.username) == ["bob@contoso.example"])
        #expect(try h.broker.accounts(clientId: "calendar").map(\.username) == ["bob@contoso.example"])
        #expect(h.changes.changes.isEmpty)
        #expect(h.broker.deviceAccount == nil)
    }

    @Test func aFailedWriteChangesNothingAndAnnouncesNothing() async throws {
        let h = Harness()
        h.store.failWrites = true
        let code = await failureCode { _ = try await h.signIn() }
        #expect(code == .storageFailed)
        #expect(h.broker.deviceAccount == nil)
        #expect(h.changes.changes.isEmpty)
    }

    @Test func badInputIsRefusedBeforeAnyWork() async throws {
        let h = Harness(knownClients: ["mail"])
        let long = String(repeating: "x", count: 257)
        #expect(await failureCode { _ = try await h.broker.currentAccount(clientId: "") } == .invalidArgument)
        #expect(await failureCode { _ = try await h.broker.currentAccount(clientId: long) } == .invalidArgument)
        #expect(await failureCode { _ = try await h.broker.currentAccount(clientId: "a b") } == .invalidArgument)
        #expect(await failureCode { _ = try await h.broker.currentAccount(clientId: "other") } == .unknownClient)
        #expect(await failureCode { _ = try await h.signIn("", client: "mail") } == .invalidUsername)
        #expect(
            await failureCode {
                _ = try await h.broker.signInWithPassword(
                    clientId: "mail", username: "alice@contoso.example", password: "", scopes: [])
            } == .invalidArgument)
        #expect(
            await failureCode {
                _ = try await h.signIn(client: "mail", scopes: (0..<65).map { "s\($0)" })
            } == .invalidArgument)
        #expect(await failureCode { _ = try await h.signIn("carol@contoso.example", client: "mail") } == .userNotFound)
        #expect(h.store.saves == 0)
        #expect(h.changes.changes.isEmpty)
    }

    /// Names that look like another on screen: a zero-width space, a right-to-left override, a
    /// byte order mark, a no-break space, a line separator, a tab.
    @Test(arguments: [
        "alice\u{200B}@contoso.example", "\u{202E}elpmaxe.osotnoc@ecila", "\u{FEFF}alice@contoso.example",
        "alice\u{00A0}@contoso.example", "alice\u{2028}@contoso.example", "alice\t@contoso.example",
    ])
    func usernamesWithInvisibleCharactersAreRefused(username: String) async throws {
        let h = Harness()
        var message = ""
        do {
            _ = try await h.signIn(username, client: "mail")
        } catch let failure as BrokerFailure {
            #expect(failure.code == .invalidUsername)
            message = failure.message
        }
        #expect(message.contains("U+"), "the error names the character: \(message)")
        #expect(h.store.saves == 0)
        // A name in another script is fine: only invisible and spacing characters are refused.
        #expect(throws: Never.self) { try InputRules.username("алиса@contoso.example") }
        #expect(throws: Never.self) { try InputRules.username("ali.ce+tag@contoso.example") }
    }
}
