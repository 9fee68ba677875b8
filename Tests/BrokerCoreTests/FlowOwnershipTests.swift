import BrokerCore
import Testing

/// Sign-in flows belong to their caller: one registered after its caller left ends at once, one
/// process's connections share a bound, and flow ids are each caller's own.
@Suite("Broker core: who owns a sign-in flow")
struct FlowOwnershipTests {
    @Test func aFlowWhoseCallerLeftOnTheWayEndsAtOnce() async throws {
        let h = Harness(callers: ScriptedCallers(departed: [":1.9"]))
        h.provider.deviceUser = nil
        let code = await failureCode {
            _ = try await h.broker.startDeviceSignIn(clientId: "mail", scopes: [], owner: ":1.9")
        }
        #expect(code == .cancelled)
        // It holds no place: the process's whole bound is still there for its live connections.
        var started: [(String, String)] = []
        for index in 0..<SignInFlows.maxPerProcess {
            let owner = ":1.\(index / SignInFlows.maxPerOwner)"
            started.append(
                (owner, try await h.broker.startDeviceSignIn(clientId: "mail", scopes: [], owner: owner).flowId))
        }
        for (owner, _) in started { await h.broker.callerLeft(owner) }
    }

    @Test func oneProcessOverManyConnectionsHasOneBound() async throws {
        let h = Harness(callers: ScriptedCallers())
        h.provider.deviceUser = nil
        var owners: Set<String> = []
        for index in 0..<SignInFlows.maxPerProcess {
            let owner = ":1.\(index / SignInFlows.maxPerOwner)"
            owners.insert(owner)
            _ = try await h.broker.startDeviceSignIn(clientId: "mail", scopes: [], owner: owner)
        }
        let refused = await failure {
            _ = try await h.broker.startDeviceSignIn(clientId: "mail", scopes: [], owner: ":1.99")
        }
        #expect(refused?.code == .limitsExceeded)
        #expect(refused?.message.contains("this program") == true, "\(String(describing: refused))")
        for owner in owners { await h.broker.callerLeft(owner) }
        _ = try await h.broker.startDeviceSignIn(clientId: "mail", scopes: [], owner: ":1.99")
        await h.broker.callerLeft(":1.99")
    }

    @Test func flowIdsAreEachCallersOwn() async throws {
        let h = Harness()
        h.provider.deviceUser = nil
        let started = try await h.broker.startDeviceSignIn(clientId: "mail", scopes: [], owner: ":1.1")
        // Another caller naming the id finds nothing, and cannot cancel it.
        #expect(
            await failureCode { try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.2") }
                == .flowNotFound)
        try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.1")
    }
}
