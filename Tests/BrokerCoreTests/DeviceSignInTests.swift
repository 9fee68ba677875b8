import BrokerCore
import Testing

/// A device-code sign-in in the core: the broker polls until the provider says the person signed
/// in, adopts the sign-in like any other, and hands its tokens to whoever waits for the flow.
@Suite("Broker core: device-code sign-in")
struct DeviceSignInTests {
    @Test func pollsUntilSignedInThenAnnouncesAndHandsOverTheTokens() async throws {
        let h = Harness()
        let started = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: ["User.Read"], owner: ":1.1")
        #expect(started.challenge.userCode == "BCDFGHJK")
        // Another caller cannot wait for it.
        let foreign = await failureCode { _ = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.2") }
        #expect(foreign == .flowNotFound)
        let tokens = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.1")
        #expect(tokens.account == ScriptedProvider.account("alice@contoso.example"))
        #expect(h.changes.changes.count == 1)
        // The flow is over.
        let again = await failureCode { _ = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.1") }
        #expect(again == .flowNotFound)
    }

    @Test func aCancelledFlowEndsItsWaitWithCancelled() async throws {
        let h = Harness()
        h.provider.deviceUser = nil
        let started = try await h.broker.startDeviceCodeSignIn(clientId: "mail", scopes: [], owner: ":1.1")
        async let waited = failureCode { _ = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.1") }
        try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.1")
        // Cancelled while waiting, or gone before the wait began.
        let code = await waited
        #expect(code == .cancelled || code == .flowNotFound)
        #expect(h.changes.changes.isEmpty)
    }
}
