import BrokerCore
import Testing

/// Any app may name a new clientId: past the bound the least recently active of those that hold
/// nothing but what they saw last are forgotten; apps holding a sign-in or tokens are kept.
@Suite("Broker core: the bound on remembered clientIds")
struct ClientLimitTests {
    @Test func theLeastRecentlyActiveWithNothingToLoseGoFirst() async throws {
        let h = Harness(maxClients: 2)
        _ = try await h.signIn(client: "mail")
        for client in ["app-1", "app-2"] { _ = try await h.broker.currentAccount(clientId: client) }
        #expect(Set(h.saved.clients.keys) == ["mail", "app-1", "app-2"])
        _ = try await h.broker.currentAccount(clientId: "app-3")
        // mail holds the device's tokens and stays; app-1, the least recent of the others, went.
        #expect(Set(h.saved.clients.keys) == ["mail", "app-2", "app-3"])
        // app-1 comes back as a new app: it sees alice, with no memory of having seen her.
        let again = try await h.broker.currentAccount(clientId: "app-1")
        #expect(again.current?.username == "alice@contoso.example" && again.previous == nil)
        #expect(Set(h.saved.clients.keys) == ["mail", "app-3", "app-1"])
    }

    /// The state file's reader holds a grant whose app has no record for damaged, so the broker
    /// never writes one: the app of a grant keeps its record even when nothing else is left in it.
    @Test func theAppOfASingleSignOnGrantKeepsItsRecord() async throws {
        let alice = ScriptedProvider.account("alice@contoso.example")
        let h = Harness(
            mode: .default,
            state: BrokerState(
                deviceId: "device-1",
                clients: ["mail": ClientRecord(lastSeen: alice), "notes": ClientRecord(lastSeen: alice)],
                singleSignOn: [alice.identifier: SingleSignOnGrant(anchorClientId: "mail", family: "1")]))
        for client in ["mail", "notes"] { _ = try await h.broker.currentAccount(clientId: client) }
        // Both saw alice last and now see nobody: notes' record is empty and goes, mail's stays.
        #expect(Set(h.store.saved?.clients.keys ?? [:].keys) == ["mail"])
    }

    /// From the attacker's side: one program names clientId after clientId while alice is signed
    /// in. The records it makes are the ones forgotten, so notes, which saw alice, still gets her
    /// as its previous account after the sign-out: its cue to clear her data.
    @Test func aFloodingProgramForgetsItsOwnRecordsFirst() async throws {
        var callers = ScriptedCallers()
        callers.programs = [":1.5": "/usr/bin/notes", ":1.9": "/usr/bin/flood"]
        let h = Harness(callers: callers, maxClients: 10)
        _ = try await h.signIn(client: "mail")
        _ = try await h.broker.currentAccount(clientId: "notes", caller: ":1.5")
        for index in 0..<1200 { _ = try await h.broker.currentAccount(clientId: "flood-\(index)", caller: ":1.9") }
        #expect(h.saved.clients["notes"] != nil)
        #expect(h.saved.clients.keys.filter { $0.hasPrefix("flood-") }.count == 9)
        _ = try await h.broker.signOut(clientId: "mail", accountId: "")
        let seen = try await h.broker.currentAccount(clientId: "notes", caller: ":1.5")
        #expect(seen.current == nil && seen.previous?.username == "alice@contoso.example")
    }

    @Test func appsHoldingASignInAreNeverForgotten() async throws {
        let h = Harness(maxClients: 1)
        _ = try await h.signIn(client: "mail")
        _ = try await h.signIn(client: "notes")
        _ = try await h.broker.currentAccount(clientId: "app-1")
        _ = try await h.broker.currentAccount(clientId: "app-2")
        #expect(Set(h.saved.clients.keys) == ["mail", "notes", "app-2"])
        #expect(h.saved.pendingRevocations.isEmpty)
    }
}

extension Harness {
    /// What the store holds last (a new device's state before the first save).
    var saved: BrokerState { store.saved ?? BrokerState(deviceId: "device-1") }
}
