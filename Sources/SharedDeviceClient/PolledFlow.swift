import BrokerAPI

/// A sign-in the person finishes on another device while the broker polls the provider (a
/// device code, an approval on a phone): what ``DeviceCodeSignIn`` and ``PhoneApprovalSignIn``
/// share, waiting for its end and ending it.
struct PolledFlow: Sendable {
    let flowId: String
    let link: BusLink
    let configuration: BrokerClientConfiguration

    /// `FinishSignIn`, waiting up to `configuration.interactiveTimeout` for the person.
    func result() async throws(BrokerError) -> TokenResult {
        try await link.finishSignIn(flowId: flowId, timeout: configuration.interactiveTimeout).result
    }

    func cancel() async throws(BrokerError) {
        _ = try await link.cancelSignIn(flowId: flowId, timeout: configuration.queryTimeout)
    }
}
