import Foundation
import JWTKit

/// Claims of an access token, shaped like an Entra v2.0 access token for Microsoft Graph.
///
/// `aud` is always ``TokenIssuer/apiAudience`` (the simulated Graph API, "https://graph.local"),
/// not the client: access tokens are for the resource server, the ID token is for the client.
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct AccessTokenClaims: JWTPayload, Equatable {
    var iss: String
    var aud: String
    var exp: ExpirationClaim
    var iat: IssuedAtClaim
    var nbf: NotBeforeClaim
    var sub: String
    var oid: String
    var tid: String
    var preferred_username: String
    var name: String
    var scp: String
    var azp: String
    var appid: String
    var ver: String
    var uti: String
    /// Continuous Access Evaluation: the client capabilities it declared (`cp1`), when it did.
    var xms_cc: [String]? = nil

    var scopes: [String] { scp.split(separator: " ").map(String.init) }

    func verify(using _: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        try nbf.verifyNotBefore()
    }
}

/// Claims of an application's own access token (the client credentials grant, RFC 6749 §4.4),
/// shaped like Entra's app-only tokens: no user, `idtyp: "app"`, `sub` = `oid` = the client's
/// name-based id.
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct AppAccessTokenClaims: JWTPayload, Equatable {
    var iss: String
    var aud: String
    var exp: ExpirationClaim
    var iat: IssuedAtClaim
    var nbf: NotBeforeClaim
    var sub: String
    var oid: String
    var tid: String
    var azp: String
    var appid: String
    var idtyp: String
    var ver: String
    var uti: String
    var xms_cc: [String]? = nil

    static let appType = "app"

    func verify(using _: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        try nbf.verifyNotBefore()
    }
}

/// Claims of an OpenID Connect ID token (OIDC Core §2).
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct IDTokenClaims: JWTPayload, Equatable {
    var iss: String
    var aud: String
    var exp: ExpirationClaim
    var iat: IssuedAtClaim
    var nbf: NotBeforeClaim
    var sub: String
    var oid: String
    var tid: String
    var preferred_username: String?
    var name: String?
    var email: String?
    var nonce: String?
    var auth_time: Int?
    var ver: String
    /// Native SSO: the device session, and the hash of its device secret.
    var sid: String?
    var ds_hash: String?

    func verify(using _: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}
