import Crypto
import JSON

/// A compact JWS (RFC 7515) signed by a key a provider publishes: the one check ID tokens and
/// security event tokens share. Messages say what is wrong in words ("it is not signed"), for the
/// caller to put after the thing's name; they never quote the token or its header.
enum CompactJWS {
    /// The header and the payload's bytes of `token` once its shape, header and signature check out.
    ///
    /// - Throws: ``IdentityError/invalidIDToken(_:)`` with the reason when the token fails a check;
    ///   ``IdentityError/unreachable(_:)`` or ``IdentityError/badResponse(_:)`` when the keys
    ///   could not be fetched.
    static func verified(_ token: String, keys jwks: JWKSCache) async throws(IdentityError) -> (
        header: JSONValue, payload: [UInt8]
    ) {
        // 1. Shape: header.payload.signature, each base64url without padding.
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw IdentityError.invalidIDToken("it is not a compact JWS (header.payload.signature)")
        }
        guard let headerBytes = Base64URL.decode(parts[0]), let payloadBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else {
            throw IdentityError.invalidIDToken("a part of it is not base64url")
        }
        let header = try IDTokenValidator.object(headerBytes, what: "its header")

        // 2. Header: algorithm, critical extensions, key.
        guard let algName = header["alg"]?.string else {
            throw IdentityError.invalidIDToken("its header names no algorithm (alg)")
        }
        guard let algorithm = JWSAlgorithm(rawValue: algName) else {
            if algName == "none" { throw IdentityError.invalidIDToken("it is not signed (alg none)") }
            // Echo the name only when it is a registered one (RFC 7518), never arbitrary header text.
            if IDTokenValidator.registeredAlgorithms.contains(algName) {
                throw IdentityError.invalidIDToken(
                    "it is signed with \(algName); the broker accepts ES256 and RS256 only")
            }
            throw IdentityError.invalidIDToken(
                "it is signed with an algorithm the broker does not accept (ES256 and RS256 only)")
        }
        guard header["crit"] == nil else {
            // RFC 7515 4.1.11: extensions the recipient does not understand make the JWS invalid.
            throw IdentityError.invalidIDToken(
                "its header lists critical extensions (crit) the broker does not understand")
        }
        let kid: String?
        switch header["kid"] {
        case nil: kid = nil
        case .string(let value)?: kid = value
        default: throw IdentityError.invalidIDToken("its key identifier (kid) is not a string")
        }
        // Keys embedded in or pointed to by the header (jwk, jku, x5u, x5c) are never used.
        let key = try await jwks.key(kid: kid, algorithm: algorithm)

        // 3. Signature, over the ASCII bytes of header.payload exactly as received.
        let signingInput = token.utf8.prefix(parts[0].count + 1 + parts[1].count)
        let digest = SHA256.hash(data: Array(signingInput))
        guard IDTokenValidator.verify(signature, digest: digest, with: key) else {
            throw IdentityError.invalidIDToken("its signature does not verify with the provider's key")
        }
        return (header, payloadBytes)
    }
}
