import BrokerCore
import Testing

@Suite("Broker core: sign-in options")
struct SignInOptionsTests {
    @Test func theProvidersFlowsAndTheSingleSignOnItAdvertises() async throws {
        let h = Harness()
        h.provider.flows = [.password, .browser]
        h.provider.offer(.tokenExchange)
        #expect(h.broker.deviceInformation().singleSignOn == nil)
        let options = try await h.broker.signInOptions(clientId: "mail")
        #expect(options.flows == [.password, .browser])
        #expect(options.singleSignOn == [.tokenExchange])
        // Reading them read discovery: the device information knows it now too.
        #expect(h.broker.deviceInformation().singleSignOn == [.tokenExchange])
    }

    @Test func aBadClientIdIsRefusedBeforeTheProviderIsAsked() async throws {
        let h = Harness()
        let code = await failureCode { _ = try await h.broker.signInOptions(clientId: "") }
        #expect(code == .invalidArgument)
        #expect(h.provider.singleSignOnSupportIfKnown == nil)
    }
}
