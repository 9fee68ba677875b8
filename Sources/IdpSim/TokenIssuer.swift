import Crypto
import Foundation

/// The success body of the token endpoint (RFC 6749 §5.1 plus `id_token` from OIDC Core §3.1.3.3).
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct TokenResponse: Codable, Sendable {
    var token_type = "Bearer"
    var access_token: String
    var expires_in: Int
    var ext_expires_in: Int
    var refresh_token: String?
    var id_token: String?
    var scope: String
    /// RFC 8693 §2.2.1, in answers to a token exchange.
    var issued_token_type: String?
    /// Native SSO §3.4: the device secret of a sign-in granted `device_sso`.
    var device_secret: String?
    /// Entra's marker of a family refresh token: the family's id.
    var foci: String?
}

/// What a successful sign-in produced, independent of the grant that produced it.
struct SignIn: Sendable {
    var user: UserAccount
    var client: ClientRegistration
    var scopes: [String]
    var nonce: String?
    var authTime: Date
    /// The family of the refresh token being rotated, nil for a fresh sign-in.
    var refreshFamily: String?
    /// Native SSO: the device session this sign-in belongs to, and whether to hand its secret out
    /// (to the sign-in that started the session; exchanges within it get the `sid` and `ds_hash` only).
    var deviceSession: DeviceSession? = nil
    /// Set for a token exchange (RFC 8693): the answer says what it issued.
    var isExchange = false
    /// Continuous Access Evaluation: the capabilities the client declared (`xms_cc`).
    var capabilities: [String] = []
}

/// Native SSO's device session, as the tokens of one sign-in carry it.
struct DeviceSession: Sendable {
    var secret: String
    var sid: String
    var handOutSecret: Bool
}

/// Ways a test can ask for an ID token that a relying party must refuse.
enum IDTokenForgery: Sendable {
    case wrongKey, wrongAudience, wrongIssuer, expired
}

/// Mints access, ID and refresh tokens.
struct TokenIssuer: Sendable {
    /// The `aud` of every access token: the simulated Graph API that `/v1.0/me` stands for.
    static let apiAudience = "https://graph.local"
    /// The `aud` of an application token for the Shared Signals transmitter, which a client
    /// credentials grant asks for with the scope `https://ssf.local/.default`.
    static let sharedSignalsAudience = "https://ssf.local"
    static let defaultScopes = ["openid", "profile", "offline_access", "User.Read"]

    let keys: SigningKeys
    let endpoints: Endpoints
    let tenantId: String
    let accessTokenLifetime: Int
    let refreshTokens: RefreshTokenStore
    let revocations: SessionRevocations
    /// Whether refresh tokens of a client in a family are marked as family refresh tokens.
    let familyTokens: Bool
    /// What the ID tokens carry as `auth_time` (a test's misbehaving provider, or the truth).
    var authTimeClaim = AuthTimeClaim.honest
    /// ID tokens without the person's names: a client finds them in userinfo.
    var namesInUserinfoOnly = false

    private func authTime(_ signIn: SignIn) -> Int? {
        switch authTimeClaim {
        case .honest: Int(signIn.authTime.timeIntervalSince1970)
        case .zero: 0
        case .absent: nil
        }
    }

    func issue(_ signIn: SignIn, forging forgery: IDTokenForgery? = nil) async throws -> TokenResponse {
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let expiry = now.addingTimeInterval(TimeInterval(accessTokenLifetime))
        let user = signIn.user
        let clientId = signIn.client.clientId
        let subject = Self.pairwiseSubject(objectId: user.objectId, clientId: clientId)
        let tenantId = user.tenantId ?? self.tenantId
        let issuer = endpoints.issuer(forTenant: tenantId)
        let access = AccessTokenClaims(
            iss: issuer, aud: Self.apiAudience, exp: .init(value: expiry), iat: .init(value: now),
            nbf: .init(value: now),
            sub: subject, oid: user.objectId, tid: tenantId, preferred_username: user.username, name: user.displayName,
            scp: signIn.scopes.joined(separator: " "), azp: clientId, appid: clientId, ver: "2.0",
            uti: RandomToken.make(bytes: 12), xms_cc: signIn.capabilities.isEmpty ? nil : signIn.capabilities)
        // Only a token that can be challenged needs to be placed against later revocations.
        if access.xms_cc?.contains("cp1") == true { await revocations.recordIssuance(uti: access.uti) }
        var response = TokenResponse(
            access_token: try await keys.sign(access), expires_in: accessTokenLifetime,
            ext_expires_in: accessTokenLifetime,
            scope: signIn.scopes.joined(separator: " "))
        if signIn.scopes.contains("openid") {
            var id = IDTokenClaims(
                iss: issuer, aud: clientId, exp: .init(value: expiry), iat: .init(value: now),
                nbf: .init(value: now),
                sub: subject, oid: user.objectId, tid: tenantId, preferred_username: user.username,
                name: user.displayName,
                email: user.email, nonce: signIn.nonce, auth_time: authTime(signIn),
                ver: "2.0",
                sid: signIn.deviceSession?.sid, ds_hash: signIn.deviceSession.map { Self.deviceSecretHash($0.secret) })
            switch forgery {
            case .wrongAudience?: id.aud = "00000000-0000-0000-0000-00000000f0e1"
            case .wrongIssuer?: id.iss = "https://impostor.example/\(tenantId)/v2.0"
            case .expired?:
                id.iat = .init(value: now.addingTimeInterval(-7200))
                id.nbf = .init(value: now.addingTimeInterval(-7200))
                id.exp = .init(value: now.addingTimeInterval(-3600))
            case .wrongKey?, nil: break
            }
            if namesInUserinfoOnly {
                id.preferred_username = nil
                id.name = nil
                id.email = nil
            }
            response.id_token = forgery == .wrongKey ? try await keys.signWithImpostorKey(id) : try await keys.sign(id)
        }
        // Like Entra, a refresh token is only issued when the client asked for offline_access.
        if signIn.scopes.contains("offline_access") {
            response.refresh_token = await refreshTokens.issue(
                username: user.username, clientId: clientId, scopes: signIn.scopes, authTime: signIn.authTime,
                family: signIn.refreshFamily)
            if familyTokens { response.foci = signIn.client.family }
        }
        if let session = signIn.deviceSession, session.handOutSecret { response.device_secret = session.secret }
        if signIn.isExchange { response.issued_token_type = TokenExchange.accessTokenType }
        return response
    }

    /// The client credentials grant (RFC 6749 §4.4): an access token of the application itself,
    /// for `audience`; no refresh token (§4.4.3) and no ID token, as there is no person.
    func issueApp(_ client: ClientRegistration, audience: String, capabilities: [String] = []) async throws
        -> TokenResponse
    {
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let expiry = now.addingTimeInterval(TimeInterval(accessTokenLifetime))
        let objectId = UserStore.derivedObjectId(clientId: client.clientId)
        let access = AppAccessTokenClaims(
            iss: endpoints.issuer(forTenant: tenantId), aud: audience, exp: .init(value: expiry),
            iat: .init(value: now), nbf: .init(value: now), sub: objectId, oid: objectId, tid: tenantId,
            azp: client.clientId, appid: client.clientId, idtyp: AppAccessTokenClaims.appType, ver: "2.0",
            uti: RandomToken.make(bytes: 12), xms_cc: capabilities.isEmpty ? nil : capabilities)
        return TokenResponse(
            access_token: try await keys.sign(access), expires_in: accessTokenLifetime,
            ext_expires_in: accessTokenLifetime, scope: audience + "/.default")
    }

    /// Native SSO's `ds_hash` (like OIDC's `at_hash`): the left-most half of the SHA-256 of the
    /// secret's ASCII octets (the hash of ES256, the ID tokens' algorithm), base64url.
    static func deviceSecretHash(_ secret: String) -> String {
        let digest = Array(SHA256.hash(data: Data(secret.utf8)).prefix(16))
        return Data(digest).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Entra's `sub` is pairwise: stable per user and application, different across applications.
    /// `oid` is the tenant-wide identifier a broker should key accounts on.
    static func pairwiseSubject(objectId: String, clientId: String) -> String {
        let digest = SHA256.hash(data: Data("\(objectId)|\(clientId)".utf8))
        return Data(digest).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Graph's `.default` scope, by the resource's URI and by its application id.
    static let graphDefaultScopes: Set<String> = [
        "https://graph.microsoft.com/.default", "00000003-0000-0000-c000-000000000000/.default",
    ]

    /// Splits a `scope` parameter; an absent or empty one means the default set. Like Entra,
    /// Graph's `.default` stands for every Graph permission the client was granted.
    static func scopes(from parameter: String?, client: ClientRegistration) -> [String] {
        let requested = (parameter ?? "").split(separator: " ").flatMap { scope in
            graphDefaultScopes.contains(String(scope)) ? client.permissions : [String(scope)]
        }
        var seen = Set<String>()
        let unique = requested.filter { seen.insert($0).inserted }
        return unique.isEmpty ? defaultScopes : unique
    }
}
