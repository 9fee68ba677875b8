import BrokerAPI
import BrokerCore
import Testing

/// Approval on a phone (CIBA, poll mode) in the core: the broker sends its own binding message,
/// polls until the person approves, adopts the sign-in like any other, and hands its tokens only
/// to the caller that started it; a phone's denial, an expiry and a device already signed in as
/// someone else each end it with what the person needs to know.
@Suite("Broker core: approval on a phone")
struct PhoneApprovalSignInTests {
    @Test func pollsUntilApprovedThenAnnouncesAndHandsOverTheTokens() async throws {
        let h = Harness()
        let started = try await h.broker.startPhoneApprovalSignIn(
            clientId: "mail", username: "alice@contoso.example", scopes: ["User.Read"], owner: ":1.1")
        #expect(started.challenge.channel == "ciba")
        // The phone was sent the very message the device shows, and it is the broker's.
        #expect(h.provider.phoneRequests.map(\.bindingMessage) == [started.challenge.bindingMessage])
        #expect(started.challenge.bindingMessage.wholeMatch(of: /[B-Z]{3}-[2-9]{3}/) != nil)
        let foreign = await failureCode { _ = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.2") }
        #expect(foreign == .flowNotFound)
        let tokens = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.1")
        #expect(tokens.account == ScriptedProvider.account("alice@contoso.example"))
        #expect(h.changes.changes.count == 1)
        let again = await failureCode { _ = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.1") }
        #expect(again == .flowNotFound)
    }

    @Test func twoRequestsCarryDifferentBindingMessages() async throws {
        let messages = Set((0..<50).map { _ in Broker.newBindingMessage() })
        #expect(messages.count > 40)
    }

    @Test func aDenialOnThePhoneEndsTheWaitWithAccessDeniedAndNobodySignedIn() async throws {
        let h = Harness()
        h.provider.phoneAnswer = BrokerFailure(.accessDenied, "the sign-in was denied on the phone")
        let started = try await h.broker.startPhoneApprovalSignIn(
            clientId: "mail", username: "alice@contoso.example", scopes: [], owner: ":1.1")
        let code = await failureCode { _ = try await h.broker.finishSignIn(flowId: started.flowId, owner: ":1.1") }
        #expect(code == .accessDenied)
        #expect(h.changes.changes.isEmpty)
        #expect(try await h.broker.currentAccount(clientId: "calendar").current == nil)
    }

    @Test func nobodysPhoneIsAskedForASignInTheDeviceWouldRefuse() async throws {
        let h = Harness()
        _ = try await h.signIn(client: "mail")
        let refused = await failureCode {
            _ = try await h.broker.startPhoneApprovalSignIn(
                clientId: "mail", username: "bob@contoso.example", scopes: [], owner: ":1.1")
        }
        #expect(refused == .accountAlreadySignedIn)
        #expect(h.provider.phoneRequests.isEmpty)
    }

    @Test func anUnknownUserOrAnEmptyNameIsRefusedBeforeAnyPolling() async throws {
        let h = Harness()
        let unknown = await failureCode {
            _ = try await h.broker.startPhoneApprovalSignIn(
                clientId: "mail", username: "mallory@contoso.example", scopes: [], owner: ":1.1")
        }
        #expect(unknown == .userNotFound)
        let empty = await failureCode {
            _ = try await h.broker.startPhoneApprovalSignIn(clientId: "mail", username: "", scopes: [], owner: ":1.1")
        }
        #expect(empty == .invalidUsername)
    }

    /// One app flooding alice's phone (starting and cancelling, over any number of connections)
    /// gets three requests to it in five minutes; bob's phone is not affected, and alice's is
    /// asked again once the oldest request is five minutes old.
    @Test func nobodysPhoneIsFlooded() async throws {
        let h = Harness()
        h.provider.phoneNeverAnswers = true
        for index in 0..<SignInFlows.phoneRequestsPerWindow {
            let started = try await h.broker.startPhoneApprovalSignIn(
                clientId: "mail", username: "alice@contoso.example", scopes: [], owner: ":1.\(index)")
            try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.\(index)")
        }
        let refused = await failure {
            _ = try await h.broker.startPhoneApprovalSignIn(
                clientId: "calendar", username: "ALICE@contoso.example", scopes: [], owner: ":1.99")
        }
        #expect(refused?.code == .limitsExceeded)
        #expect(refused?.message.contains("it is asked again in 300 s") == true, "\(String(describing: refused))")
        #expect(h.provider.phoneRequests.count == SignInFlows.phoneRequestsPerWindow)
        let bob = try await h.broker.startPhoneApprovalSignIn(
            clientId: "mail", username: "bob@contoso.example", scopes: [], owner: ":1.99")
        try await h.broker.cancelSignIn(flowId: bob.flowId, owner: ":1.99")
        h.clock.advance(SignInFlows.phoneRequestWindow)
        let again = try await h.broker.startPhoneApprovalSignIn(
            clientId: "mail", username: "alice@contoso.example", scopes: [], owner: ":1.99")
        try await h.broker.cancelSignIn(flowId: again.flowId, owner: ":1.99")
    }

    @Test func startSignInWithTheCibaMethodIsThisFlow() async throws {
        let h = Harness()
        h.provider.phoneNeverAnswers = true
        let started = try await h.broker.startSignIn(
            .ciba, clientId: "mail", username: "alice@contoso.example", scopes: [], owner: ":1.1")
        guard case .phoneApprovalChallenge(let challenge) = started.challenge else {
            Issue.record("not a phone approval: \(started.challenge)")
            return
        }
        #expect(challenge.interval == 1)
        try await h.broker.cancelSignIn(flowId: started.flowId, owner: ":1.1")
        #expect(h.changes.changes.isEmpty)
    }
}
