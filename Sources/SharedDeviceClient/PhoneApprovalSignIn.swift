import BrokerAPI

/// An approval on the person's phone in progress (OpenID Connect CIBA): what
/// ``PublicClientApplication/signInWithPhoneApproval(username:scopes:)`` returns. The provider has
/// asked the person, on their own phone, to approve this sign-in; show them ``bindingMessage``,
/// which their phone shows too, so that they approve only the request that matches. ``result()``
/// waits for them.
///
/// ```swift
/// let signIn = try await app.signInWithPhoneApproval(username: "alice@contoso.example", scopes: ["User.Read"])
/// print("Approve the sign-in on your phone if it shows \(signIn.bindingMessage)")
/// let result = try await signIn.result()
/// ```
public final class PhoneApprovalSignIn: Sendable {
    /// The broker's name for this flow.
    public let flowId: String
    /// The short code the phone shows too (the broker's, never an app's).
    public let bindingMessage: String
    /// When the provider forgets the request.
    public let expiresOn: UnixTime
    private let flow: PolledFlow

    init(
        flowId: String, challenge: PhoneApprovalChallenge, link: BusLink, configuration: BrokerClientConfiguration
    ) {
        self.flowId = flowId
        bindingMessage = challenge.bindingMessage
        expiresOn = UnixTime(seconds: UnixTime.now.seconds + challenge.expiresIn)
        flow = PolledFlow(flowId: flowId, link: link, configuration: configuration)
    }

    /// Waits (up to `configuration.interactiveTimeout`) until the person has approved, and
    /// returns the tokens; ``BrokerError/codeExpired(_:)`` when nobody did in time,
    /// ``BrokerError/accessDenied(_:)`` when they denied it, ``BrokerError/cancelled(_:)`` after
    /// ``cancel()``.
    public func result() async throws(BrokerError) -> TokenResult {
        try await flow.result()
    }

    /// Ends the sign-in in the broker (an approval given afterwards signs nobody in).
    public func cancel() async throws(BrokerError) {
        try await flow.cancel()
    }
}
