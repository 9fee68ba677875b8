import BrokerCore
import Testing

@Suite("Broker core: reads without the actor, and the order of a change")
struct ReadsAndOrderTests {
    @Test func aChangeIsAnnouncedAfterItsSaveAndBeforeItsSync() async throws {
        let h = Harness()
        let result = try await h.signIn()
        #expect(h.store.timeline == ["save", "announce", "sync"])
        // A change nobody else needs to hear of (what this app saw) is saved and synced, not announced.
        _ = try await h.broker.currentAccount(clientId: "calendar")
        #expect(h.store.timeline == ["save", "announce", "sync", "save", "sync"])
        try await h.broker.signOut(clientId: "mail", accountId: result.account.identifier)
        // The sign-out's own change; the revocations it owed are settled by a later, silent one.
        let timeline = h.store.timeline
        let announced = try #require(timeline.lastIndex(of: "announce"))
        #expect(timeline[announced - 1] == "save" && timeline.dropFirst(announced + 1).first == "sync", "\(timeline)")
    }

    @Test func theCurrentAccountIsReadWithoutTheActorOnceTheAppHasSeenIt() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        let alice = ScriptedProvider.account("alice@contoso.example")
        // Not seen yet: the answer must be recorded, which only the actor does.
        #expect(try h.broker.currentAccountIfSeen(clientId: "calendar") == nil)
        _ = try await h.broker.currentAccount(clientId: "calendar")
        let seen = try h.broker.currentAccountIfSeen(clientId: "calendar")
        #expect(seen?.current == alice && seen?.previous == alice)
        #expect(throws: BrokerFailure.self) { try h.broker.currentAccountIfSeen(clientId: "") }
    }

    @Test func aCachedTokenIsReadWithoutTheActorUntilTheMargin() async throws {
        let h = Harness()
        let first = try await h.signIn()
        let cached = try h.broker.cachedTokenIfFresh(
            clientId: "mail", scopes: ["User.Read"], accountId: first.account.identifier)
        #expect(cached?.accessToken == first.accessToken)
        #expect(cached?.correlationId != first.correlationId)
        #expect(try h.broker.cachedTokenIfFresh(clientId: "mail", scopes: ["Mail.Read"], accountId: "") == nil)
        h.clock.advance(3600 - 299)
        #expect(try h.broker.cachedTokenIfFresh(clientId: "mail", scopes: ["User.Read"], accountId: "") == nil)
        #expect(throws: BrokerFailure.self) {
            try h.broker.cachedTokenIfFresh(clientId: "mail", scopes: ["User.Read"], accountId: "someone-else")
        }
        #expect(h.provider.refreshCalls == 0)
    }

    @Test func correlationIdsAreDistinctVersion4UUIDs() async throws {
        let h = Harness()
        _ = try await h.signIn()
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = try #require(
                try h.broker.cachedTokenIfFresh(clientId: "mail", scopes: ["User.Read"], accountId: "")
            ).correlationId
            let bytes = Array(id.utf8)
            #expect(bytes.count == 36 && bytes[14] == UInt8(ascii: "4") && "89ab".utf8.contains(bytes[19]))
            seen.insert(id)
        }
        #expect(seen.count == 1000)
    }

    @Test func deviceIdsAreVersion4UUIDs() {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = Broker.newDeviceId()
            let bytes = Array(id.utf8)
            #expect(bytes.count == 36)
            #expect([8, 13, 18, 23].allSatisfy { bytes[$0] == UInt8(ascii: "-") })
            #expect(bytes[14] == UInt8(ascii: "4"))
            #expect("89ab".utf8.contains(bytes[19]))
            #expect(id.allSatisfy { "0123456789abcdef-".contains($0) })
            seen.insert(id)
        }
        #expect(seen.count == 1000)
    }
}
