import BrokerCore
import Testing

/// Any app may name a new clientId: past the bound the least recently active are forgotten,
/// those holding nothing but what they saw last first, and a forgotten refresh token is owed a
/// revocation.
@Suite("Broker core: the bound on remembered clientIds")
struct ClientLimitTests {
    @Test func theLeastRecentlyActiveWithNothingToLoseGoFirst() async throws {
        let h = Harness(maxClients: 3)
        _ = try await h.signIn(client: "mail")
        for client in ["app-1", "app-2"] { _ = try await h.broker.currentAccount(clientId: client) }
        #expect(Set(h.saved.clients.keys) == ["mail", "app-1", "app-2"])
        _ = try await h.broker.currentAccount(clientId: "app-3")
        // mail holds the device's tokens: app-1, the least recent of the others, went.
        #expect(Set(h.saved.clients.keys) == ["mail", "app-2", "app-3"])
        // app-1 comes back as a new app: it sees alice, with no memory of having seen her.
        let again = try await h.broker.currentAccount(clientId: "app-1")
        #expect(again.current?.username == "alice@contoso.example" && again.previous == nil)
        #expect(h.saved.clients.count == 3)
    }

    @Test func aForgottenRefreshTokenIsOwedARevocation() async throws {
        let h = Harness(mode: .default, maxClients: 1)
        _ = try await h.signIn(client: "mail")
        let mailToken = try #require(h.saved.clients["mail"]?.refreshToken)
        _ = try await h.signIn("bob@contoso.example", client: "notes")
        #expect(Set(h.saved.clients.keys) == ["notes"])
        let owed = h.saved.pendingRevocations.map(\.token)
        #expect(owed == [.refreshToken(mailToken)] || h.provider.revoked.contains(mailToken))
    }
}

extension Harness {
    /// What the store holds last (a new device's state before the first save).
    var saved: BrokerState { store.saved ?? BrokerState(deviceId: "device-1") }
}
