import Foundation

/// State of Entra-style native authentication sign-ins, keyed by continuation token.
///
/// Each step answers with a fresh continuation token for the same flow; earlier tokens of the
/// flow stay usable (a wrong one-time code must not end the sign-in), and the flow ends when
/// tokens are issued.
actor NativeAuthStore {
    enum Challenge: Sendable, Equatable {
        case none
        case password
        case oob(code: String, sentAt: Date)
    }

    struct Flow: Sendable {
        var id: String
        var username: String
        var clientId: String
        var challengeTypes: [String]
        var challenge: Challenge = .none
        var startedAt: Date
    }

    enum OOBCheck: Sendable {
        case valid(Flow)
        case wrongCode
        case expired
        case notChallenged
    }

    /// How long a continuation token lives, independent of the code lifetime.
    static let flowLifetime: TimeInterval = 15 * 60
    static let codeLength = 8

    let codeLifetime: TimeInterval
    private var flows: [String: Flow] = [:]
    private var tokens: [String: String] = [:]

    init(codeLifetime: TimeInterval) {
        self.codeLifetime = codeLifetime
    }

    /// Starts a flow and returns its first continuation token.
    func start(username: String, clientId: String, challengeTypes: [String]) -> String {
        let flow = Flow(
            id: UUID().uuidString, username: username, clientId: clientId, challengeTypes: challengeTypes,
            startedAt: Date())
        flows[flow.id] = flow
        return newToken(for: flow.id)
    }

    /// The flow behind a continuation token, if it is live and belongs to `clientId`.
    func flow(for token: String, clientId: String) -> Flow? {
        guard let id = tokens[token], let flow = flows[id], flow.clientId == clientId else { return nil }
        guard Date().timeIntervalSince(flow.startedAt) < Self.flowLifetime else {
            flows[id] = nil
            return nil
        }
        return flow
    }

    /// Records the chosen challenge and returns the next continuation token. A new oob challenge
    /// replaces (and so invalidates) any earlier code: that is how "resend code" works.
    func setChallenge(_ challenge: Challenge, flowId: String) -> String? {
        guard flows[flowId] != nil else { return nil }
        flows[flowId]?.challenge = challenge
        return newToken(for: flowId)
    }

    func checkCode(_ code: String, flowId: String) -> OOBCheck {
        guard let flow = flows[flowId], case .oob(let expected, let sentAt) = flow.challenge else {
            return .notChallenged
        }
        guard Date().timeIntervalSince(sentAt) < codeLifetime else { return .expired }
        guard ClientAuthenticator.constantTimeEqual(expected, code) else { return .wrongCode }
        return .valid(flow)
    }

    /// Ends a flow once tokens were issued, invalidating all of its continuation tokens.
    func finish(flowId: String) {
        flows[flowId] = nil
        tokens = tokens.filter { $0.value != flowId }
    }

    private func newToken(for flowId: String) -> String {
        let token = RandomToken.make(bytes: 32)
        tokens[token] = flowId
        return token
    }
}
