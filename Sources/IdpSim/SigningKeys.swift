import Foundation
import JWTKit

/// The provider's token-signing key: a fresh P-256 key per process (ES256), published in the JWKS.
///
/// A new key per start is deliberate: tokens from a previous run must fail signature checks,
/// which is what a relying party sees after a real provider rotates its keys.
struct SigningKeys: Sendable {
    let kid: String
    let collection: JWTKeyCollection
    /// The JWKS document (RFC 7517) served at `discovery/v2.0/keys`.
    let jwks: JWKSDocument

    struct JWKSDocument: Codable, Sendable {
        struct Key: Codable, Sendable {
            var kty: String
            var use: String
            var alg: String
            var kid: String
            var crv: String
            var x: String
            var y: String
        }
        var keys: [Key]
    }

    static let algorithm = "ES256"

    static func generate() async throws -> SigningKeys {
        let key = ES256PrivateKey()
        let kid = String(UUID().uuidString.lowercased().prefix(8))
        guard let parameters = key.parameters else {
            throw UsersFileError(description: "cannot derive public key parameters")
        }
        let collection = JWTKeyCollection()
        await collection.add(ecdsa: key, kid: JWKIdentifier(string: kid))
        let jwk = JWKSDocument.Key(
            kty: "EC", use: "sig", alg: algorithm, kid: kid, crv: "P-256", x: parameters.x, y: parameters.y)
        return SigningKeys(kid: kid, collection: collection, jwks: JWKSDocument(keys: [jwk]))
    }

    /// Signs with the published key; `typ` is `JWT`, or `secevent+jwt` for a SET (RFC 8417 §2.3).
    func sign(_ payload: some JWTPayload, typ: String = "JWT") async throws -> String {
        var header = JWTHeader()
        header.typ = typ
        return try await collection.sign(payload, kid: JWKIdentifier(string: kid), header: header)
    }

    /// Signs with a fresh key under the published `kid`: what a forger without the provider's key produces.
    func signWithImpostorKey(_ payload: some JWTPayload, typ: String = "JWT") async throws -> String {
        let impostor = JWTKeyCollection()
        await impostor.add(ecdsa: ES256PrivateKey(), kid: JWKIdentifier(string: kid))
        var header = JWTHeader()
        header.typ = typ
        return try await impostor.sign(payload, kid: JWKIdentifier(string: kid), header: header)
    }

    func verify<Payload: JWTPayload>(_ token: String, as _: Payload.Type) async throws -> Payload {
        try await collection.verify(token, as: Payload.self)
    }
}
