import Foundation

/// State of the browser-based authorization code flow: pending sign-in forms, browser sessions
/// (the cookie that makes a second authorize silent), and issued authorization codes.
actor AuthorizationStore {
    /// A validated `/authorize` request waiting for the user to submit the sign-in form.
    struct PendingRequest: Sendable {
        var clientId: String
        var redirectUri: String
        var scopes: [String]
        var state: String?
        var nonce: String?
        var codeChallenge: String
        var loginHint: String?
        var createdAt: Date
    }

    struct Session: Sendable {
        var username: String
        var authTime: Date
    }

    /// What an authorization code stands for (RFC 6749 §4.1.2, RFC 7636 §4.4).
    struct CodeGrant: Sendable {
        var clientId: String
        var redirectUri: String
        var codeChallenge: String
        var username: String
        var scopes: [String]
        var nonce: String?
        var authTime: Date
        var expiresAt: Date
    }

    enum Redemption: Sendable {
        case valid(CodeGrant)
        case unknown
        case alreadyUsed
        case expired
    }

    static let pendingLifetime: TimeInterval = 30 * 60

    let codeLifetime: TimeInterval
    private var pending: [String: PendingRequest] = [:]
    private var sessions: [String: Session] = [:]
    private var codes: [String: CodeGrant] = [:]
    private var usedCodes: Set<String> = []

    init(codeLifetime: TimeInterval) {
        self.codeLifetime = codeLifetime
    }

    func addPending(_ request: PendingRequest) -> String {
        let id = RandomToken.make(bytes: 24)
        pending[id] = request
        return id
    }

    func pendingRequest(_ id: String) -> PendingRequest? {
        guard let request = pending[id], Date().timeIntervalSince(request.createdAt) < Self.pendingLifetime else {
            return nil
        }
        return request
    }

    func removePending(_ id: String) {
        pending[id] = nil
    }

    func createSession(username: String) -> (id: String, session: Session) {
        let id = RandomToken.make(bytes: 32)
        let session = Session(username: username, authTime: Date())
        sessions[id] = session
        return (id, session)
    }

    func session(_ id: String) -> Session? {
        sessions[id]
    }

    func endSession(_ id: String) {
        sessions[id] = nil
    }

    /// Ends every browser session of `username` (an administrator revoked them); returns how many.
    func endSessions(username: String) -> Int {
        let ids = sessions.filter { $0.value.username.lowercased() == username.lowercased() }.map(\.key)
        for id in ids { sessions[id] = nil }
        return ids.count
    }

    /// Moves every browser session's authentication back by `seconds` (for tests: "signed in an
    /// hour ago"); returns how many there are.
    func ageSessions(by seconds: TimeInterval) -> Int {
        for id in sessions.keys { sessions[id]?.authTime.addTimeInterval(-seconds) }
        return sessions.count
    }

    func issueCode(for request: PendingRequest, session: Session) -> String {
        let code = RandomToken.make(bytes: 32)
        codes[code] = CodeGrant(
            clientId: request.clientId, redirectUri: request.redirectUri, codeChallenge: request.codeChallenge,
            username: session.username, scopes: request.scopes, nonce: request.nonce, authTime: session.authTime,
            expiresAt: Date().addingTimeInterval(codeLifetime))
        return code
    }

    /// Codes are single use: any redemption attempt consumes the code, successful or not.
    func redeem(_ code: String) -> Redemption {
        if usedCodes.contains(code) { return .alreadyUsed }
        guard let grant = codes.removeValue(forKey: code) else { return .unknown }
        usedCodes.insert(code)
        guard grant.expiresAt > Date() else { return .expired }
        return .valid(grant)
    }
}
