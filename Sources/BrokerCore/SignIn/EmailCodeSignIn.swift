/// The one-time code sign-in (`StartSignIn`, then `SubmitCode`, `ResendCode`): native
/// authentication sends a code to the person's email, and the person types it in the app.

/// What the provider does for it.
public protocol EmailCodeSignInProvider: Sendable {
    /// Asks the provider to send a one-time code to the user.
    func startCodeSignIn(clientId: String, username: String) async throws -> ProviderCodeChallenge
    /// Sends a new code for a flow started with ``startCodeSignIn(clientId:username:)``.
    func resendCode(clientId: String, continuationToken: String) async throws -> ProviderCodeChallenge
    /// Redeems a code; `.invalidCode` leaves the flow usable, `.codeExpired` asks for a new code.
    func submitCode(clientId: String, continuationToken: String, code: String, scopes: Scopes) async throws
        -> ProviderTokens
}

extension EmailCodeSignInProvider where Self: SignInRefusingProvider {
    public func startCodeSignIn(clientId: String, username: String) async throws -> ProviderCodeChallenge {
        throw signInRefusal
    }
    public func resendCode(clientId: String, continuationToken: String) async throws -> ProviderCodeChallenge {
        throw signInRefusal
    }
    public func submitCode(clientId: String, continuationToken: String, code: String, scopes: Scopes) async throws
        -> ProviderTokens
    { throw signInRefusal }
}

/// A one-time code the provider sent (native authentication's `oob` challenge), as the core keeps
/// it: with the provider's continuation token, a secret. Apps get the contract's `CodeChallenge`,
/// which has no such field (the names differ so that the two are never confused).
public struct ProviderCodeChallenge: Sendable, Equatable {
    /// The provider's handle on the flow: a secret, never logged or returned to apps.
    public var continuationToken: String
    /// Where the code went, e.g. `email`.
    public var channel: String
    /// The masked address, e.g. `a***@c***.example`.
    public var sentTo: String
    public var codeLength: UInt32

    public init(continuationToken: String, channel: String, sentTo: String, codeLength: UInt32) {
        self.continuationToken = continuationToken
        self.channel = channel
        self.sentTo = sentTo
        self.codeLength = codeLength
    }

    /// What the person is shown: the contract's `CodeChallenge`, without the secret.
    var shown: CodeChallenge { CodeChallenge(channel: channel, sentTo: sentTo, codeLength: Int(codeLength)) }
}

/// A code flow waiting for its code.
struct PendingEmailCodeSignIn: PendingSignIn {
    static let flow = SignInFlow.emailCode
    /// A code flow nobody finishes is forgotten after this long (the provider's code has expired by then).
    static let lifetime: Int64 = 30 * 60

    var clientId: String
    var username: String
    var scopes: Scopes
    /// The provider's handle on the flow; a secret.
    var continuationToken: String
    var startedAt: Int64

    var expiresAt: Int64? { startedAt + Self.lifetime }
    /// Nothing runs for it: the person's next call does.
    func stop() {}
}

extension Broker {
    /// Asks the provider to send a one-time code; returns the flow's id and where the code went.
    public func startEmailCodeSignIn(
        clientId: String, username: String, scopes requested: [String],
        owner: String
    ) async throws(BrokerFailure) -> (flowId: String, challenge: CodeChallenge) {
        try checkClient(clientId)
        try InputRules.username(username)
        try InputRules.scopes(requested)
        try checkTokenStorage()
        if let holder = account(for: clientId), !holder.hasUsername(username) { throw alreadySignedIn(holder) }
        try admitFlow(owner: owner)
        let correlationId = Self.newCorrelationId()
        let challenge = try await callProvider(correlationId) {
            try await self.provider.startCodeSignIn(clientId: clientId, username: username)
        }
        // The limits again: other flows may have started while the provider answered.
        try admitFlow(owner: owner)
        let flowId = Self.newCorrelationId()
        try flows.add(
            PendingEmailCodeSignIn(
                clientId: clientId, username: username, scopes: signInScopes(requested, clientId: clientId),
                continuationToken: challenge.continuationToken, startedAt: clock.now()), id: flowId, owner: owner)
        try await endIfCallerLeft(owner)
        logger.info(
            "code sign-in started",
            metadata: [
                "clientId": "\(clientId)", "flowId": "\(flowId)",
                "correlationId": "\(correlationId)",
            ])
        return (flowId, challenge.shown)
    }

    /// Redeems the code. A wrong code leaves the flow usable (`.invalidCode`); an expired one
    /// asks for ``resendCode(flowId:owner:)`` (`.codeExpired`); other failures end the flow.
    public func submitCode(flowId: String, code: String, owner: String) async throws(BrokerFailure) -> AppTokens {
        try InputRules.flowId(flowId)
        try InputRules.code(code)
        let flow = try flows.flow(flowId, owner: owner, as: PendingEmailCodeSignIn.self)
        try checkTokenStorage()
        let startGeneration = generation
        let correlationId = Self.newCorrelationId()
        do {
            let tokens = try await callProvider(correlationId) {
                try await self.provider.submitCode(
                    clientId: flow.clientId, continuationToken: flow.continuationToken,
                    code: code, scopes: flow.scopes)
            }
            flows.remove(flowId, owner: owner)
            return try await adoptSignIn(
                tokens, clientId: flow.clientId, scopes: flow.scopes, correlationId: correlationId,
                startGeneration: startGeneration)
        } catch  where [.invalidCode, .codeExpired, .serverUnavailable].contains(error.code) {
            // The person can type the code again, ask for a new one, or try again once the
            // provider is back: the flow lives on until its lifetime ends.
            throw error
        } catch {
            flows.remove(flowId, owner: owner)
            throw error
        }
    }

    /// Sends a new code for the flow.
    public func resendCode(flowId: String, owner: String) async throws(BrokerFailure) -> CodeChallenge {
        try InputRules.flowId(flowId)
        let flow = try flows.flow(flowId, owner: owner, as: PendingEmailCodeSignIn.self)
        let challenge = try await callProvider(Self.newCorrelationId()) {
            try await self.provider.resendCode(clientId: flow.clientId, continuationToken: flow.continuationToken)
        }
        flows.update(flowId, owner: owner) { (flow: inout PendingEmailCodeSignIn) in
            flow.continuationToken = challenge.continuationToken
        }
        return challenge.shown
    }
}
