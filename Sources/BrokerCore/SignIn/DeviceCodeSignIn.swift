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
    func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> DeviceCodePoll
}

extension DeviceCodeSignInProvider where Self: SignInRefusingProvider {
    public func startDeviceSignIn(clientId: String, scopes: Scopes) async throws -> DeviceAuthorizationGrant {
        throw signInRefusal
    }
    public func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> DeviceCodePoll {
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

/// One poll of a device-code sign-in (RFC 8628 3.5).
public enum DeviceCodePoll: Sendable {
    /// Nobody has finished signing in yet.
    case pending
    /// Too fast: wait 5 seconds longer between polls from now on.
    case slowDown
    case tokens(ProviderTokens)
}

/// A device-code sign-in being polled: the task ends with the sign-in's tokens.
struct PendingDeviceCodeSignIn: PendingSignIn {
    static let flow = SignInFlow.deviceCode
    var task: Task<AppTokens, any Error>
    /// The polling ends it, at the code's expiry at the latest.
    var expiresAt: Int64? { nil }
    func stop() { task.cancel() }
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
        try admitFlow(owner: owner)
        let flowId = Self.newCorrelationId()
        let startGeneration = generation
        let deadline = clock.now() + max(1, grant.expiresIn)
        let task = Task { () async throws -> AppTokens in
            try await self.pollDeviceSignIn(
                grant, clientId: clientId, scopes: scopes, correlationId: correlationId, deadline: deadline,
                startGeneration: startGeneration)
        }
        do { try flows.add(PendingDeviceCodeSignIn(task: task), id: flowId, owner: owner) } catch {
            task.cancel()
            throw error
        }
        try await endIfCallerLeft(owner)
        logger.info(
            "device sign-in started",
            metadata: ["clientId": "\(clientId)", "flowId": "\(flowId)", "correlationId": "\(correlationId)"])
        return (
            flowId,
            DeviceCodeChallenge(
                channel: SignInFlow.deviceCode.rawValue, verificationUri: grant.verificationUri,
                verificationUriComplete: grant.verificationUriComplete,
                userCode: grant.userCode, expiresIn: grant.expiresIn, interval: max(1, grant.interval))
        )
    }

    private func pollDeviceSignIn(
        _ grant: DeviceAuthorizationGrant, clientId: String, scopes: Scopes, correlationId: String, deadline: Int64,
        startGeneration: UInt64
    ) async throws(BrokerFailure) -> AppTokens {
        var interval = max(1, grant.interval)
        // After a provider outage the polls slow down, up to this, until the provider answers again.
        var wait = interval
        let provider = self.provider
        while true {
            do {
                try await Task.sleep(for: .seconds(wait))
            } catch {
                throw BrokerFailure(.cancelled, "the device sign-in was cancelled")
            }
            guard clock.now() < deadline else {
                throw BrokerFailure(
                    .codeExpired, "nobody signed in with the code \(grant.userCode) in time; start the sign-in again")
            }
            let poll: DeviceCodePoll
            do throws(BrokerFailure) {
                poll = try await callProvider(correlationId) {
                    try await provider.pollDeviceSignIn(
                        clientId: clientId, deviceCode: grant.deviceCode, scopes: scopes)
                }
            } catch  where error.code == .serverUnavailable {
                // The person may be signing in on their phone right now: an outage of the provider
                // is waited out for the code's lifetime, not turned into a failed sign-in.
                wait = min(max(wait * 2, interval), Self.longestDevicePollWait)
                logger.notice(
                    "the provider is unavailable; the device sign-in polls again later",
                    metadata: ["correlationId": "\(correlationId)", "seconds": "\(wait)"])
                continue
            }
            wait = interval
            switch poll {
            case .pending:
                continue
            case .slowDown:
                interval += 5
                wait = interval
            case .tokens(let tokens):
                return try await adoptSignIn(
                    tokens, clientId: clientId, scopes: scopes, correlationId: correlationId,
                    startGeneration: startGeneration)
            }
        }
    }

    /// The longest pause between device-code polls while the provider is unavailable.
    static let longestDevicePollWait: Int64 = 60

    /// Waits for the device-code sign-in `flowId` of `owner` to end, and returns its tokens.
    public func finishSignIn(flowId: String, owner: String) async throws(BrokerFailure) -> AppTokens {
        try InputRules.flowId(flowId)
        let flow = try flows.flow(flowId, owner: owner, as: PendingDeviceCodeSignIn.self)
        let outcome = await flow.task.result
        flows.remove(flowId, owner: owner)
        switch outcome {
        case .success(let tokens):
            return tokens
        case .failure(let failure as BrokerFailure):
            throw failure
        case .failure:
            throw BrokerFailure(.cancelled, "the device sign-in was cancelled")
        }
    }
}
