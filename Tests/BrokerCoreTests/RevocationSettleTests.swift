import BrokerCore
import Testing

/// What a sign-out's revocations tell the store: only a refresh token the provider revoked leaves
/// the files without a snapshot of its own (``StateStore``'s `revoked`). A device secret, whose
/// revocation a provider may answer with a 200 without revoking it, and a token the provider
/// refused, still grant access and are purged at once.
@Suite("Broker core: which revocations the store may leave for the next snapshot")
struct RevocationSettleTests {
    @Test func onlyRefreshTokensTheProviderRevokedAreHandedOnAsRevoked() async throws {
        let h = Harness()
        h.provider.offer(.nativeSSO)
        let signedIn = try await h.signIn(client: "mail")
        _ = try await h.broker.acquireTokenSilent(
            clientId: "calendar", scopes: ["User.Read"], accountId: "", forceRefresh: false)
        let mail = try #require(h.broker.snapshot.clients["mail"]?.refreshToken)
        let calendar = try #require(h.broker.snapshot.clients["calendar"]?.refreshToken)
        let deviceSecret = try #require(h.broker.snapshot.singleSignOn.values.first?.deviceSecret?.secret)
        h.provider.refusedRevocations = [calendar]

        let outcome = try await h.broker.signOut(clientId: "mail", accountId: signedIn.account.identifier)
        #expect(!outcome.tokensRevoked)
        #expect(Set(h.provider.revoked).isSuperset(of: [mail, calendar, deviceSecret]))
        #expect(h.broker.snapshot.pendingRevocations.isEmpty, "refused for good: not owed any more")
        #expect(h.store.revokedBySave.contains([mail]), "\(h.store.revokedBySave)")
        #expect(h.store.revokedBySave.allSatisfy { $0.isSubset(of: [mail]) }, "\(h.store.revokedBySave)")
    }
}
