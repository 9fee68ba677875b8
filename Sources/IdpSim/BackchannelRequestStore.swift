import Foundation

/// The backchannel authentication requests (CIBA) handed out and what became of each.
///
/// Two ids per request: the `auth_req_id`, the client's secret for polling, and a phone-side id
/// the person's device answers with, so that the phone never learns what redeems the tokens.
/// Bounded: a user has at most ``maxPerUser`` requests stored (waiting, answered and not yet
/// collected, or expired less than ``expiredKept`` ago); beyond that a new one is refused.
actor BackchannelRequestStore {
    static let maxPerUser = 20
    /// How long an expired request is still known, so that a late poll hears `expired_token`.
    static let expiredKept: TimeInterval = 60

    enum Poll: Equatable {
        case pending, slowDown, denied, expired, unknown
        case approved(username: String, scopes: [String], at: Date)
    }

    /// A waiting request as the phone shows it.
    struct Pending: Sendable {
        var id: String
        var clientId: String
        var scope: String
        var bindingMessage: String?
        var expiresIn: Int

        var json: [String: Any] {
            [
                "id": id, "client_id": clientId, "scope": scope, "binding_message": bindingMessage ?? "",
                "expires_in": expiresIn,
            ]
        }
    }

    private struct Entry {
        var phoneId: String
        var username: String
        var clientId: String
        var scopes: [String]
        var bindingMessage: String?
        var created: Date
        var expiresAt: Date
        var pace: PollPace
        var decision: Decision = .undecided

        var isUndecided: Bool {
            if case .undecided = decision { return true }
            return false
        }
    }

    private enum Decision {
        case undecided
        case approved(Date)
        case denied
    }

    /// By `auth_req_id`.
    private var entries: [String: Entry] = [:]
    private let slowDowns: Int

    init(slowDowns: Int) { self.slowDowns = slowDowns }

    /// A new request, or nil when the user has too many already.
    func start(
        username: String, clientId: String, scopes: [String], bindingMessage: String?, lifetime: TimeInterval,
        interval: Int
    ) -> String? {
        let now = Date()
        prune(now)
        guard entries.values.filter({ $0.username == username }).count < Self.maxPerUser else { return nil }
        // 192 bits each, URL-safe.
        let authReqId = RandomToken.make(bytes: 24)
        entries[authReqId] = Entry(
            phoneId: RandomToken.make(bytes: 16), username: username, clientId: clientId, scopes: scopes,
            bindingMessage: bindingMessage, created: now, expiresAt: now.addingTimeInterval(lifetime),
            pace: PollPace(interval: interval, forcedSlowDowns: slowDowns))
        return authReqId
    }

    /// The user's waiting, unexpired requests, oldest first.
    func pending(username: String) -> [Pending] {
        let now = Date()
        prune(now)
        return entries.values.filter { $0.username == username && $0.expiresAt > now && $0.isUndecided }
            .sorted { $0.created < $1.created }
            .map { entry in
                Pending(
                    id: entry.phoneId, clientId: entry.clientId, scope: entry.scopes.joined(separator: " "),
                    bindingMessage: entry.bindingMessage,
                    expiresIn: max(0, Int(entry.expiresAt.timeIntervalSince(now).rounded(.up))))
            }
    }

    /// The phone's answer to a waiting, unexpired request; whose it was, or nil when there is none.
    func decide(phoneId: String, approve: Bool) -> (username: String, clientId: String)? {
        let now = Date()
        guard !phoneId.isEmpty,
            let key = entries.first(where: { $0.value.phoneId == phoneId })?.key,
            let entry = entries[key], entry.expiresAt > now, entry.isUndecided
        else { return nil }
        entries[key]?.decision = approve ? .approved(now) : .denied
        return (entry.username, entry.clientId)
    }

    /// One poll: too early after the last one is `slow_down` (and the interval grows by 5 s, as
    /// RFC 8628 §3.5 which CIBA 11 follows). Approved tokens are handed out once.
    func poll(_ authReqId: String, clientId: String) -> Poll {
        let now = Date()
        prune(now)
        guard var entry = entries[authReqId], entry.clientId == clientId else { return .unknown }
        guard entry.expiresAt > now else { return .expired }
        defer { entries[authReqId] = entry }
        if entry.pace.slowDown(at: now) { return .slowDown }
        switch entry.decision {
        case .undecided: return .pending
        case .denied: return .denied
        case .approved(let at):
            // Redeemed once: the entry goes, so a second poll is `invalid_grant`.
            entry.expiresAt = .distantPast
            return .approved(username: entry.username, scopes: entry.scopes, at: at)
        }
    }

    private func prune(_ now: Date) {
        entries = entries.filter { $0.value.expiresAt.addingTimeInterval(Self.expiredKept) > now }
    }
}
