import BrokerCore
import Testing

/// Sign-in flows belong to their caller: one registered after its caller left ends at once, one
/// process's connections share a bound, one program's processes another, and flow ids are each
/// caller's own.
@Suite("Broker core: who owns a sign-in flow")
struct FlowOwnershipTests {
    @Test func aFlowWhoseCallerLeftOnTheWayEndsAtOnce() async throws {
        let h = Harness(callers: ScriptedCallers(departed: [":1.9"]))
        h.provider.deviceUser = nil
        let code = await failureCode {
            _ = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: ":1.9")
        }
        #expect(code == .cancelled)
        // It holds no place: the process's whole bound is still there for its live connections.
        var started: [(String, String)] = []
        for index in 0..<SignInFlows.maxPerProcess {
            let owner = ":1.\(index / SignInFlows.maxPerOwner)"
            started.append(
                (owner, try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: owner).flowId))
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
            _ = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: owner)
        }
        let refused = await failure {
            _ = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: ":1.99")
        }
        #expect(refused?.code == .limitsExceeded)
        #expect(refused?.message.contains("this process") == true, "\(String(describing: refused))")
        for owner in owners { await h.broker.callerLeft(owner) }
        _ = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: ":1.99")
        await h.broker.callerLeft(":1.99")
    }

    /// One app in many processes, each with its connections, takes its own share and no more:
    /// another program still starts a sign-in, and so does every caller once the app's end.
    @Test func oneProgramOverManyProcessesHasOneShare() async throws {
        // 5 processes of one program with 2 connections each, 8 flows a connection: 80 asked.
        var callers = ScriptedCallers()
        let owners = (0..<10).map { ":1.\($0)" }
        for (index, owner) in owners.enumerated() {
            callers.processes[owner] = "process \(index / 2)"
            callers.programs[owner] = "/usr/bin/flooder"
        }
        callers.processes[":2.1"] = "process 99"
        callers.programs[":2.1"] = "/usr/bin/mail"
        let h = Harness(callers: callers)
        h.provider.deviceUser = nil
        var started = 0
        var refused: [BrokerFailure] = []
        for owner in owners {
            for _ in 0..<SignInFlows.maxPerOwner {
                do {
                    _ = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: owner)
                    started += 1
                } catch {
                    refused.append(error)
                }
            }
        }
        #expect(started == SignInFlows.maxPerProgram)
        #expect(refused.count == 80 - SignInFlows.maxPerProgram)
        #expect(refused.allSatisfy { $0.code == .limitsExceeded && $0.message.contains("this program") })
        // Another app is not refused for what the first holds.
        _ = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: ":2.1")
        for owner in owners { await h.broker.callerLeft(owner) }
        await h.broker.callerLeft(":2.1")
    }

    @Test func flowIdsAreEachCallersOwn() async throws {
        let h = Harness()
        h.provider.deviceUser = nil
        let started = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: ":1.1")
        // Another caller naming the id finds nothing, and cannot cancel it.
        #expect(
            await failureCode { try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.2") }
                == .flowNotFound)
        try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.1")
    }
}
