import Foundation

/// Opaque, rotating refresh tokens grouped in families (OAuth 2.0 Security BCP §4.14.2).
///
/// Every redemption invalidates the presented token and issues a successor in the same family.
/// Presenting an already rotated token means it leaked or the client raced itself: the whole
/// family is revoked so that neither copy can be used again.
actor RefreshTokenStore {
    struct Grant: Sendable {
        var username: String
        var clientId: String
        var scopes: [String]
        var family: String
        var expiresAt: Date
        var authTime: Date
    }

    enum Redemption: Sendable {
        case valid(Grant)
        case unknown
        case expired
        case revoked
        /// A rotated token was replayed; its family is now revoked.
        case reused
        /// Issued to another client; nothing was consumed. Family refresh tokens are redeemed so.
        case wrongClient(Grant)
        /// The refresh asked for a scope its grant does not hold; nothing was consumed, so the
        /// token stays usable (a refused request must not turn the next refresh into a reuse).
        case scopeNotGranted(String)
    }

    private struct Entry {
        var grant: Grant
        var rotated = false
    }

    private var entries: [String: Entry] = [:]
    private var revokedFamilies: Set<String> = []
    private let lifetime: TimeInterval

    init(lifetime: TimeInterval) {
        self.lifetime = lifetime
    }

    /// Issues a token; `family` is nil for a fresh sign-in and the parent's family on rotation.
    func issue(username: String, clientId: String, scopes: [String], authTime: Date, family: String? = nil) -> String {
        let token = RandomToken.make(bytes: 48)
        let grant = Grant(
            username: username, clientId: clientId, scopes: scopes, family: family ?? UUID().uuidString,
            expiresAt: Date().addingTimeInterval(lifetime), authTime: authTime)
        entries[token] = Entry(grant: grant)
        return token
    }

    /// Consumes a token: a valid one is marked rotated, so the caller must issue its successor.
    /// A token of another client is not consumed (nor counted as reuse): the caller decides
    /// whether that client may redeem it, as a family refresh token. `scopes`, when given, must
    /// all be in the grant, or nothing is consumed.
    func redeem(_ token: String, clientId: String, scopes: [String]? = nil) -> Redemption {
        guard var entry = entries[token] else { return .unknown }
        if revokedFamilies.contains(entry.grant.family) { return .revoked }
        guard entry.grant.expiresAt > Date() else { return .expired }
        guard entry.grant.clientId == clientId else { return .wrongClient(entry.grant) }
        if entry.rotated {
            revokedFamilies.insert(entry.grant.family)
            return .reused
        }
        if let extra = scopes?.first(where: { !entry.grant.scopes.contains($0) }) { return .scopeNotGranted(extra) }
        entry.rotated = true
        entries[token] = entry
        return .valid(entry.grant)
    }

    /// The grant of a token presented by another client (a token exchange's subject), without
    /// consuming it: like Entra's, a refresh token stays valid for others until it expires or
    /// is revoked, rotated or not.
    func inspect(_ token: String) -> Grant? {
        guard let entry = entries[token], !revokedFamilies.contains(entry.grant.family),
            entry.grant.expiresAt > Date()
        else { return nil }
        return entry.grant
    }

    /// Whose a token is, whatever its state, without consuming it.
    func owner(of token: String) -> String? {
        entries[token]?.grant.username
    }

    /// RFC 7009: revokes the token's whole family. Unknown tokens are ignored.
    /// When `clientId` is given, tokens issued to other clients are left alone (§2.1).
    func revoke(_ token: String, clientId: String?) {
        guard let entry = entries[token] else { return }
        if let clientId, entry.grant.clientId != clientId { return }
        revokedFamilies.insert(entry.grant.family)
    }

    /// Revokes every family of a user (an administrator's "revoke sessions"); returns how many.
    func revokeAll(username: String) -> Int {
        let families = Set(
            entries.values.filter { $0.grant.username.lowercased() == username.lowercased() }.map(\.grant.family))
        let fresh = families.subtracting(revokedFamilies)
        revokedFamilies.formUnion(families)
        return fresh.count
    }
}

/// Unguessable opaque strings for refresh tokens, codes, continuation tokens and session ids.
enum RandomToken {
    static func make(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// A numeric one-time code of `length` digits.
    static func digits(_ length: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return String((0..<length).map { _ in Character(String(Int.random(in: 0...9, using: &generator))) })
    }
}
