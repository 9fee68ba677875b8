import BrokerCore
import Testing

/// A token store that is locked (a keyring nobody unlocked): everything that needs no token is
/// answered, token calls are refused with `StorageLocked`, and the store's tokens join the state
/// once it opens.
@Suite("Broker core: a locked token store")
struct TokenStorageLockTests {
    static let message = "the login keyring is locked; unlock it"

    @Test func tokenCallsAreRefusedAndAccountsAnswered() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        // What a restart with the keyring locked starts with: the accounts, no token.
        var stateWithoutTokens = h.broker.snapshot
        for clientId in stateWithoutTokens.clients.keys {
            stateWithoutTokens.clients[clientId]?.refreshToken = nil
            stateWithoutTokens.clients[clientId]?.accessTokens = [:]
        }
        let locked = Harness(state: stateWithoutTokens)
        locked.broker.tokenStorageLocked(Self.message)

        let alice = ScriptedProvider.account("alice@contoso.example")
        #expect(try await locked.broker.currentAccount(clientId: "calendar").current == alice)
        #expect(try locked.broker.cachedTokenIfFresh(clientId: "mail", scopes: ["User.Read"], accountId: "") == nil)
        let silent = await failureCode {
            _ = try await locked.broker.acquireTokenSilent(
                clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        }
        #expect(silent == .storageLocked)
        #expect(await failureCode { _ = try await locked.signIn(client: "calendar") } == .storageLocked)
        // Bad input is still bad input.
        let bad = await failureCode {
            _ = try await locked.broker.signInWithPassword(clientId: "mail", username: "", password: "x", scopes: [])
        }
        #expect(bad == .invalidUsername || bad == .invalidArgument)
        #expect(locked.provider.refreshCalls == 0)
    }

    @Test func aSignOutWhileLockedSaysItsTokensWaitForTheUnlock() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        h.broker.tokenStorageLocked(Self.message)
        let outcome = try await h.broker.signOut(clientId: "calendar", accountId: "")
        #expect(!outcome.tokensRevoked)
        #expect(outcome.notes.contains { $0.contains("the keyring is locked") })
        #expect(h.broker.deviceAccount == nil)
    }

    @Test func theStoreOpeningAdoptsItsTokensOrStaysLockedOnFailure() async throws {
        let h = Harness()
        let signedIn = try await h.signIn(client: "mail")
        let full = h.broker.snapshot
        h.broker.tokenStorageLocked(Self.message)

        struct StillLocked: Error {}
        await #expect(throws: StillLocked.self) { try await h.broker.tokenStorageOpened { _ in throw StillLocked() } }
        #expect(h.broker.tokenStorageIsLocked)

        try await h.broker.tokenStorageOpened { _ in full }
        #expect(!h.broker.tokenStorageIsLocked)
        let token = try await h.broker.acquireTokenSilent(
            clientId: "mail", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        #expect(token.accessToken == signedIn.accessToken)
    }
}
