import Foundation

/// OpenID Connect Native SSO's device secrets and the sessions they belong to.
///
/// A sign-in that is granted `openid` and `device_sso` starts a device session (`sid`) and gets a
/// device secret; the ID tokens issued in it carry the `sid` and the secret's `ds_hash`. Another
/// app of the device presents an ID token and the secret in a token exchange: both must belong to
/// the same live session. Revoking the secret (RFC 7009) ends the session.
actor DeviceSecretStore {
    struct Session: Sendable {
        var username: String
        var sid: String
        /// The client the secret was issued to.
        var clientId: String
        var expiresAt: Date
        var revoked = false
    }

    enum Lookup: Sendable {
        case live(Session)
        case unknown
        case expired
        case revoked
    }

    private var bySecret: [String: Session] = [:]
    private let lifetime: TimeInterval

    init(lifetime: TimeInterval) {
        self.lifetime = lifetime
    }

    /// A new device secret and session for `username`'s sign-in through `clientId`.
    func issue(username: String, clientId: String) -> (secret: String, sid: String) {
        let secret = RandomToken.make(bytes: 48)
        let sid = UUID().uuidString.lowercased()
        bySecret[secret] = Session(
            username: username, sid: sid, clientId: clientId, expiresAt: Date().addingTimeInterval(lifetime))
        return (secret, sid)
    }

    func lookup(_ secret: String) -> Lookup {
        guard let session = bySecret[secret] else { return .unknown }
        if session.revoked { return .revoked }
        guard session.expiresAt > Date() else { return .expired }
        return .live(session)
    }

    /// Whose a device secret is, whatever its state.
    func owner(of secret: String) -> String? {
        bySecret[secret]?.username
    }

    /// Whether `sid` names a session whose secret is still usable.
    func isLive(sid: String) -> Bool {
        bySecret.values.contains { $0.sid == sid && !$0.revoked && $0.expiresAt > Date() }
    }

    /// RFC 7009 for a device secret; false when `token` is none.
    func revoke(_ token: String) -> Bool {
        guard bySecret[token] != nil else { return false }
        bySecret[token]?.revoked = true
        return true
    }

    /// Revokes every device secret of `username`; returns how many were live.
    func revokeAll(username: String) -> Int {
        var count = 0
        for (secret, session) in bySecret
        where session.username.lowercased() == username.lowercased() && !session.revoked {
            bySecret[secret]?.revoked = true
            count += 1
        }
        return count
    }
}
