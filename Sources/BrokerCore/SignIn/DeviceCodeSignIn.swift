/// The device-code sign-in (RFC 8628; `StartSignIn` with method `device-code`, then
/// `FinishSignIn`): the person signs in on another device with a user code while the broker
/// polls the provider.

/// What the provider does for it.
public protocol DeviceCodeSignInProvider: Sendable {
    /// The device authorization grant (RFC 8628): `.notSupported` when discovery names no
    /// `device_authorization_endpoint`.
    func startDeviceSignIn(clientId: String, scopes: Scopes) async throws -> DeviceAuthorizationGrant
    /// One poll of the token endpoint with the device code; a denial is `.accessDenied`, an
    /// expired code `.codeExpired`.
    func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> SignInPoll
}

extension DeviceCodeSignInProvider where Self: SignInRefusingProvider {
    public func startDeviceSignIn(clientId: String, scopes: Scopes) async throws -> DeviceAuthorizationGrant {
        throw signInRefusal
    }
    public func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> SignInPoll {
        throw signInRefusal
    }
}

/// The device authorization grant's first answer (RFC 8628 3.2): what the person is shown, and
/// the device code the broker polls with (a secret).
public struct DeviceAuthorizationGrant: Sendable, Equatable {
    public var deviceCode: String
    public var userCode: String
    public var verificationUri: String
    public var verificationUriComplete: String?
    /// Seconds the codes live.
    public var expiresIn: Int64
    /// Seconds to wait between polls.
    public var interval: Int64

    public init(
        deviceCode: String, userCode: String, verificationUri: String, verificationUriComplete: String?,
        expiresIn: Int64, interval: Int64
    ) {
        self.deviceCode = deviceCode
        self.userCode = userCode
        self.verificationUri = verificationUri
        self.verificationUriComplete = verificationUriComplete
        self.expiresIn = expiresIn
        self.interval = interval
    }
}

/// A device-code sign-in being polled.
struct PendingDeviceCodeSignIn: PolledPendingSignIn {
    static let flow = SignInFlow.deviceCode
    var task: Task<AppTokens, any Error>
}

extension Broker {
    /// Starts a device-code sign-in (RFC 8628): returns what the person is shown; the broker then
    /// polls the provider at the interval it asks (slower after `slow_down`) until the person has
    /// signed in elsewhere, and the sign-in ends like the others (`AccountChanged`, the tokens,
    /// which ``finishSignIn(flowId:owner:)`` hands to the app).
    public func startDeviceCodeSignIn(clientId: String, scopes requested: [String], owner: String)
        async throws(BrokerFailure) -> (flowId: String, challenge: DeviceCodeChallenge)
    {
        try checkClient(clientId)
        try InputRules.scopes(requested)
        try checkTokenStorage()
        try admitFlow(owner: owner)
        let scopes = signInScopes(requested, clientId: clientId)
        let correlationId = Self.newCorrelationId()
        let provider = self.provider
        let grant = try await callProvider(correlationId) {
            try await provider.startDeviceSignIn(clientId: clientId, scopes: scopes)
        }
        let flowId = try await startPolling(
            PendingDeviceCodeSignIn.self, make: PendingDeviceCodeSignIn.init,
            schedule: PollSchedule(
                interval: grant.interval, deadline: clock.now() + max(1, grant.expiresIn),
                expired: BrokerFailure(
                    .codeExpired, "nobody signed in with the code \(grant.userCode) in time; start the sign-in again")),
            clientId: clientId, scopes: scopes, correlationId: correlationId, owner: owner
        ) {
            try await provider.pollDeviceSignIn(clientId: clientId, deviceCode: grant.deviceCode, scopes: scopes)
        }
        return (
            flowId,
            DeviceCodeChallenge(
                channel: SignInFlow.deviceCode.rawValue, verificationUri: grant.verificationUri,
                verificationUriComplete: grant.verificationUriComplete,
                userCode: grant.userCode, expiresIn: grant.expiresIn, interval: max(1, grant.interval))
        )
    }
}
