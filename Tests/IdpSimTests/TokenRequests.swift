import Foundation
import JWTKit
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The ID token fields the tests verify with JWTKit against the published JWKS.
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct VerifiedIDToken: JWTPayload {
    var iss: IssuerClaim
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var sub: SubjectClaim
    var oid: String
    var tid: String
    var preferred_username: String
    var nonce: String?

    func verify(using _: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}

func passwordGrant(
    _ server: IdpSimServer, username: String = "alice@contoso.test", password: String = "Passw0rd!",
    clientId: String = "broker-app", scope: String = "openid profile offline_access User.Read",
    extra: [(String, String)] = []
) async throws -> HTTPResult {
    try await HTTP.postForm(
        server.tokenURL,
        [
            ("grant_type", "password"), ("client_id", clientId), ("username", username),
            ("password", password), ("scope", scope),
        ] + extra)
}

func refreshGrant(_ server: IdpSimServer, _ token: String, clientId: String = "broker-app") async throws -> HTTPResult {
    try await HTTP.postForm(
        server.tokenURL, [("grant_type", "refresh_token"), ("client_id", clientId), ("refresh_token", token)])
}
