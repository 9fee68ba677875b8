import BrokerAPI

/// A device-code sign-in (RFC 8628) in progress: what ``PublicClientApplication/signInWithDeviceCode(scopes:)``
/// returns. Show the person ``verificationUri`` and ``userCode`` (or a QR code of
/// ``verificationUriComplete``); they sign in there, on any device, while the broker polls the
/// provider. ``result()`` waits for them.
///
/// ```swift
/// let signIn = try await app.signInWithDeviceCode(scopes: ["User.Read"])
/// print("Open \(signIn.verificationUri) and enter \(signIn.userCode)")
/// let result = try await signIn.result()
/// ```
public final class DeviceCodeSignIn: Sendable {
    /// The broker's name for this flow.
    public let flowId: String
    /// Where the person signs in.
    public let verificationUri: String
    /// The same with the code filled in, when the provider gives it (for a QR code).
    public let verificationUriComplete: String?
    /// The code the person enters there.
    public let userCode: String
    /// When the code expires.
    public let expiresOn: UnixTime
    private let flow: PolledFlow

    init(
        flowId: String, challenge: DeviceCodeChallenge, link: BusLink,
        configuration: BrokerClientConfiguration
    ) {
        self.flowId = flowId
        verificationUri = challenge.verificationUri
        verificationUriComplete = challenge.verificationUriComplete
        userCode = challenge.userCode
        expiresOn = UnixTime(seconds: UnixTime.now.seconds + challenge.expiresIn)
        flow = PolledFlow(flowId: flowId, link: link, configuration: configuration)
    }

    /// Waits (up to `configuration.interactiveTimeout`) until the person has signed in, and
    /// returns the tokens; ``BrokerError/codeExpired(_:)`` when nobody did in time,
    /// ``BrokerError/accessDenied(_:)`` when they denied it, ``BrokerError/cancelled(_:)`` after
    /// ``cancel()``.
    public func result() async throws(BrokerError) -> TokenResult {
        try await flow.result()
    }

    /// Ends the sign-in in the broker.
    public func cancel() async throws(BrokerError) {
        try await flow.cancel()
    }
}
