/// Approval on the person's phone (OpenID Connect CIBA Core 1.0, poll mode; `StartSignIn` with
/// method `ciba`, then `FinishSignIn`): the person gives their username at the device, the
/// provider asks them on their own authentication device (a phone app) to approve, showing the
/// same short binding message the device shows, and the broker polls the provider meanwhile.

/// What the provider does for it.
public protocol PhoneApprovalSignInProvider: Sendable {
    /// CIBA's authentication request for `loginHint`: `.notSupported` when discovery names no
    /// `backchannel_authentication_endpoint` with the poll mode; `.userNotFound` for a user the
    /// provider does not know.
    func startPhoneApproval(clientId: String, loginHint: String, bindingMessage: String, scopes: Scopes) async throws
        -> PhoneApprovalRequest
    /// One poll of the token endpoint with the request's id; a denial is `.accessDenied`, an
    /// expired request `.codeExpired`.
    func pollPhoneApproval(clientId: String, authRequestId: String, scopes: Scopes) async throws -> SignInPoll
}

extension PhoneApprovalSignInProvider where Self: SignInRefusingProvider {
    public func startPhoneApproval(clientId: String, loginHint: String, bindingMessage: String, scopes: Scopes)
        async throws -> PhoneApprovalRequest
    {
        throw signInRefusal
    }
    public func pollPhoneApproval(clientId: String, authRequestId: String, scopes: Scopes) async throws -> SignInPoll {
        throw signInRefusal
    }
}

/// The provider's answer to an authentication request (CIBA Core 7.3).
public struct PhoneApprovalRequest: Sendable, Equatable {
    /// The request's id, which the broker polls with (a secret).
    public var authRequestId: String
    /// Seconds the request lives.
    public var expiresIn: Int64
    /// Seconds to wait between polls.
    public var interval: Int64

    public init(authRequestId: String, expiresIn: Int64, interval: Int64) {
        self.authRequestId = authRequestId
        self.expiresIn = expiresIn
        self.interval = interval
    }
}

/// An approval on a phone being polled.
struct PendingPhoneApproval: PolledPendingSignIn {
    static let flow = SignInFlow.ciba
    var task: Task<AppTokens, any Error>
}

extension Broker {
    /// Asks the provider to have `username` approve this sign-in on their phone, and returns the
    /// binding message both screens show; the broker then polls the provider until they approve
    /// or deny, and the sign-in ends like the others (``finishSignIn(flowId:owner:)``).
    ///
    /// The binding message is the broker's, never the app's: a request on someone's phone carries
    /// no text an app chose ("IT support: approve this"), and a person who did not start it sees
    /// a code no screen in front of them shows.
    public func startPhoneApprovalSignIn(clientId: String, username: String, scopes requested: [String], owner: String)
        async throws(BrokerFailure) -> (flowId: String, challenge: PhoneApprovalChallenge)
    {
        try checkClient(clientId)
        try InputRules.username(username)
        try InputRules.scopes(requested)
        try checkTokenStorage()
        // Nobody's phone is asked for a sign-in the device would refuse.
        if let holder = account(for: clientId), !holder.hasUsername(username) { throw alreadySignedIn(holder) }
        try admitFlow(owner: owner)
        try flows.admitPhoneRequest(to: username, now: clock.now())
        let scopes = signInScopes(requested, clientId: clientId)
        let correlationId = Self.newCorrelationId()
        let bindingMessage = Self.newBindingMessage()
        let provider = self.provider
        let request = try await callProvider(correlationId) {
            try await provider.startPhoneApproval(
                clientId: clientId, loginHint: username, bindingMessage: bindingMessage, scopes: scopes)
        }
        let flowId = try await startPolling(
            PendingPhoneApproval.self, make: PendingPhoneApproval.init,
            schedule: PollSchedule(
                interval: request.interval, deadline: clock.now() + max(1, request.expiresIn),
                expired: BrokerFailure(
                    .codeExpired, "nobody approved the sign-in on \(username)'s phone in time; start it again")),
            clientId: clientId, scopes: scopes, correlationId: correlationId, owner: owner
        ) {
            try await provider.pollPhoneApproval(
                clientId: clientId, authRequestId: request.authRequestId, scopes: scopes)
        }
        return (
            flowId,
            PhoneApprovalChallenge(
                channel: SignInFlow.ciba.rawValue, bindingMessage: bindingMessage, expiresIn: request.expiresIn,
                interval: max(1, request.interval))
        )
    }

    /// Three letters and three digits ("KTW-482"): short enough to compare at a glance (CIBA
    /// asks for a short, plain binding message), from letters and digits no one confuses (no
    /// vowels, so no words; no 0 or 1).
    public static func newBindingMessage() -> String {
        let letters = Array("BCDFGHJKLMNPQRSTVWXZ")
        let digits = Array("23456789")
        let word = String((0..<3).map { _ in letters.randomElement() ?? "K" })
        let number = String((0..<3).map { _ in digits.randomElement() ?? "7" })
        return "\(word)-\(number)"
    }
}
