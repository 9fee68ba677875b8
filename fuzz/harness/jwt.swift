// ID tokens: IDTokenValidator.validate, the compact-JWS split, strict base64url, the header
// (alg, crit, kid), the JWKS lookup, the signature, and the claim checks (iss, sub, aud, azp,
// exp, iat, nbf, nonce).
//
// The first byte picks the mode. Even: the rest is the token as received, which almost never
// gets past the signature. Odd: the rest is `header JSON` NUL `payload JSON`, which the harness
// signs with the provider's key the header asks for (ES256 unless it says RS256), so that the
// claim checks after the signature are fuzzed too. Either way a token that validates must carry
// this issuer, this client among its audiences and an expiry in the future.
import BrokerCore
import Crypto
import CryptoExtras
import FoundationEssentials

@testable import Identity

private let issuer = "https://login.example/contoso/v2.0"
private let clientId = "mail-app"
private let clock = FixedClock()
private let ecKey = try! P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 7, count: 32))
private let rsaKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

private let jwksDocument: [UInt8] = {
    let point = [UInt8](ecKey.publicKey.x963Representation)
    let ec =
        #"{"kty":"EC","crv":"P-256","use":"sig","alg":"ES256","kid":"ec-1","x":"\#(Base64URL.encode(point[1..<33]))","y":"\#(Base64URL.encode(point[33..<65]))"}"#
    let rsaPublic = try! rsaKey.publicKey.getKeyPrimitives()
    let rsa =
        #"{"kty":"RSA","use":"sig","alg":"RS256","kid":"rsa-1","n":"\#(Base64URL.encode(rsaPublic.modulus))","e":"\#(Base64URL.encode(rsaPublic.publicExponent))"}"#
    let other = try! P256.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 9, count: 32)).publicKey
        .x963Representation
    let ec2 =
        #"{"kty":"EC","crv":"P-256","kid":"ec-2","x":"\#(Base64URL.encode(other[1..<33]))","y":"\#(Base64URL.encode(other[33..<65]))"}"#
    return Array(#"{"keys":[\#(ec),\#(rsa),\#(ec2)]}"#.utf8)
}()

private let validator = IDTokenValidator(
    issuer: issuer,
    jwks: JWKSCache(
        uri: "https://login.example/contoso/discovery/v2.0/keys", clock: clock,
        fetch: { (_: String) async throws(IdentityError) -> [UInt8] in jwksDocument }),
    clock: clock)

func fuzzOne(_ bytes: [UInt8]) {
    guard let mode = bytes.first else { return }
    let body = bytes.dropFirst()
    let token: String
    if mode & 1 == 0 {
        token = String(decoding: body, as: UTF8.self)
    } else {
        let header: ArraySlice<UInt8>
        let payload: ArraySlice<UInt8>
        if let nul = body.firstIndex(of: 0) {
            header = body[..<nul]
            payload = body[(nul + 1)...]
        } else {
            header = ArraySlice(#"{"alg":"ES256","kid":"ec-1"}"#.utf8)
            payload = body
        }
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        let signature: [UInt8]
        if header.count < 4096, String(decoding: header, as: UTF8.self).contains("RS256") {
            signature = [UInt8](
                (try? rsaKey.signature(for: Array(signingInput.utf8), padding: .insecurePKCS1v1_5))?.rawRepresentation
                    ?? Data())
        } else {
            signature = [UInt8]((try? ecKey.signature(for: Array(signingInput.utf8)))?.rawRepresentation ?? Data())
        }
        token = signingInput + "." + Base64URL.encode(signature)
    }
    let nonce: String? = mode & 2 == 0 ? nil : "nonce-1"
    let result = runBlocking { () -> Result<IdentityClaims, IdentityError> in
        do throws(IdentityError) {
            return .success(try await validator.validate(token, clientId: clientId, expectedNonce: nonce))
        } catch {
            return .failure(error)
        }
    }
    switch result {
    case .success(let identity):
        let claims = identity.claims
        if claims["iss"]?.string != issuer { violated("a token from another issuer validated") }
        let audiences = claims["aud"]?.array?.compactMap(\.string) ?? claims["aud"]?.string.map { [$0] } ?? []
        if !audiences.contains(clientId) { violated("a token for another client validated") }
        guard let exp = claims["exp"]?.number, exp + 300 > Double(clock.now()) else {
            violated(
                "an expired token "
                    + "validated")
        }
        if let nonce, claims["nonce"]?.string != nonce { violated("a token with another nonce validated") }
        if mode & 1 == 0 { violated("a token the harness did not sign validated") }
        _ = try? identity.account(environment: "login.example", fallbackTenant: "contoso")
    case .failure(let error):
        guard case .invalidIDToken = error else { violated("validation failed with \(error), not invalidIDToken") }
    }
}
