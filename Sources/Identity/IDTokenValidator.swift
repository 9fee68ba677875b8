import BrokerCore
import Crypto
import CryptoExtras
import JSON

/// Checks an ID token the way OpenID Connect Core 1.0, section 3.1.3.7, asks: a compact JWS
/// signed with ES256 or RS256 by a key the provider publishes, from the expected issuer, for this
/// client, current, and carrying the nonce the sign-in sent.
///
/// Error messages say what is wrong in words; they never quote the token or its claims.
struct IDTokenValidator: Sendable {
    /// The issuer identifier exactly as the discovery document gives it (`ProviderMetadata.issuer`),
    /// or the `{tenantid}` template of an Entra multi-tenant authority: each token's `iss` is
    /// then the template filled with the token's own `tid`, as Entra's libraries check it.
    let issuer: String
    let jwks: JWKSCache
    let clock: any WallClock
    /// Seconds of disagreement tolerated between the broker's clock and the provider's.
    let allowedClockSkew: Int64
    /// With a template issuer: the one tenant admitted (the configured `tenantId`), nil for any.
    let allowedTenant: String?
    /// The text around the template issuer's `{tenantid}`, found once; nil for an exact issuer.
    private let template: (prefix: String, suffix: String)?

    init(
        issuer: String, jwks: JWKSCache, clock: any WallClock, allowedClockSkew: Int64 = 300,
        allowedTenant: String? = nil
    ) {
        self.issuer = issuer
        self.jwks = jwks
        self.clock = clock
        self.allowedClockSkew = max(0, allowedClockSkew)
        self.allowedTenant = allowedTenant.flatMap { $0.isEmpty ? nil : $0 }
        template = ProviderMetadata.templateParts(issuer).map { (prefix: $0.0, suffix: $0.1) }
    }

    /// Validates `idToken` and returns its claims.
    ///
    /// - Parameters:
    ///   - clientId: the client the token must be for (`aud`).
    ///   - expectedNonce: the `nonce` sent with the authorization request, if one was; the token
    ///     must then carry the same. Pass nil for grants that send none (password, refresh).
    /// - Throws: ``IdentityError/invalidIDToken(_:)`` when the token fails a check;
    ///   ``IdentityError/unreachable(_:)`` or ``IdentityError/badResponse(_:)`` when the provider's
    ///   signing keys could not be fetched.
    ///   - recency: what the authorization request's `max_age` asked of the person's
    ///     authentication; the token's `auth_time` must show it was met.
    func validate(
        _ idToken: String, clientId: String, expectedNonce: String?, recency: AuthenticationRecency? = nil
    ) async throws(IdentityError) -> IdentityClaims {
        // 1-3. A compact JWS whose signature verifies with a key the provider publishes.
        let payloadBytes = try await CompactJWS.verified(idToken, keys: jwks).payload

        // 4. Claims.
        let claims = try Self.object(payloadBytes, what: "its payload")
        try check(claims, clientId: clientId, expectedNonce: expectedNonce, recency: recency)
        return IdentityClaims(claims: claims)
    }

    /// A multi-tenant authority's token: issued by the tenant it names (`tid`, a plain path
    /// segment), which must be the admitted one when the configuration names it.
    private func checkTenant(of claims: JSONValue, issuer tokenIssuer: String, prefix: String, suffix: String)
        throws(IdentityError)
    {
        guard let tenant = claims["tid"]?.string, !tenant.isEmpty,
            tenant.unicodeScalars.allSatisfy(Self.isTenantCharacter)
        else {
            throw IdentityError.invalidIDToken("it names no tenant (tid), which a multi-tenant authority's tokens must")
        }
        guard tokenIssuer == prefix + tenant + suffix else {
            throw IdentityError.invalidIDToken("its issuer is not the tenant it names (\(tenant))")
        }
        if let allowedTenant, tenant != allowedTenant {
            throw IdentityError.tenantNotAllowed(
                "the account belongs to tenant \(tenant), and this device admits only tenant \(allowedTenant) "
                    + "(tenantId in the broker's configuration); sign in with an account of that tenant")
        }
    }

    /// What a tenant id (a GUID, or a domain name) is made of: nothing that could change the URL
    /// it is put into.
    private static func isTenantCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", "-", ".": true
        default: false
        }
    }

    /// The claim checks (section 3.1.3.7, steps 2–4, 9–11), on a payload whose signature verified.
    private func check(_ claims: JSONValue, clientId: String, expectedNonce: String?, recency: AuthenticationRecency?)
        throws(IdentityError)
    {
        guard let tokenIssuer = claims["iss"]?.string else {
            throw IdentityError.invalidIDToken("it has no issuer (iss)")
        }
        if let template {
            try checkTenant(of: claims, issuer: tokenIssuer, prefix: template.prefix, suffix: template.suffix)
        } else if tokenIssuer != issuer {
            throw IdentityError.invalidIDToken("it was issued by someone other than \(issuer)")
        }

        guard let sub = claims["sub"]?.string, !sub.isEmpty else {
            throw IdentityError.invalidIDToken("it has no subject (sub)")
        }

        let audiences: [String]
        switch claims["aud"] {
        case .string(let value)?:
            audiences = [value]
        case .array(let values)?:
            var strings: [String] = []
            for value in values {
                guard let string = value.string else {
                    throw IdentityError.invalidIDToken("its audience (aud) list holds something other than strings")
                }
                strings.append(string)
            }
            audiences = strings
        case nil:
            throw IdentityError.invalidIDToken("it has no audience (aud)")
        default:
            throw IdentityError.invalidIDToken("its audience (aud) is neither a string nor a list of strings")
        }
        guard audiences.contains(clientId) else {
            throw IdentityError.invalidIDToken("it is not meant for the client \(clientId)")
        }
        if let azp = claims["azp"], audiences.count > 1 {
            guard azp.string == clientId else {
                throw IdentityError.invalidIDToken(
                    "it has several audiences and its authorized party (azp) is not the client \(clientId)")
            }
        }

        let now = clock.now()
        guard let exp = try Self.numericDate(claims, "exp") else {
            throw IdentityError.invalidIDToken("it has no expiry (exp)")
        }
        guard now < exp.addingClamped(allowedClockSkew) else {
            throw IdentityError.invalidIDToken("it has expired; if it was just issued, check the device's clock")
        }
        guard let iat = try Self.numericDate(claims, "iat") else {
            throw IdentityError.invalidIDToken("it has no issue time (iat)")
        }
        guard iat <= now.addingClamped(allowedClockSkew) else {
            throw IdentityError.invalidIDToken("it says it was issued in the future; check the device's clock")
        }
        if let nbf = try Self.numericDate(claims, "nbf") {
            guard nbf <= now.addingClamped(allowedClockSkew) else {
                throw IdentityError.invalidIDToken("it is not valid yet (nbf); check the device's clock")
            }
        }

        if let recency { try Self.checkAuthenticationTime(claims, issuedAt: iat, recency: recency) }

        if let expectedNonce {
            guard let nonce = claims["nonce"] else {
                throw IdentityError.invalidIDToken("it carries no nonce, but the sign-in sent one")
            }
            guard nonce.string == expectedNonce else {
                throw IdentityError.invalidIDToken("its nonce is not the one the sign-in sent")
            }
        }
    }

    /// OpenID Connect Core 3.1.2.1: the person must have authenticated within `max_age` seconds of
    /// the request (0: during this sign-in), and the token's `auth_time` must show it.
    ///
    /// The two clocks are never compared, only the spans they measure. On the provider's clock the
    /// person authenticated less than `iat + 1 - auth_time` seconds before it issued the token (both
    /// are whole seconds, rounded down); on the broker's, the sign-in began `tokenRequestAt -
    /// startedAt` before the token was asked for, which is no later than it was issued. The person
    /// authenticated during the sign-in (or within `max_age` before it) for certain only when the
    /// first span fits in the second. When the clocks agree, this asks `auth_time` to be at or after
    /// the start rounded up to the next whole second: an authentication in the very second the
    /// sign-in began cannot be told from one just before it, which is a browser session someone
    /// else left (a person takes longer than that to type a password). No skew allowance is given,
    /// and none is needed.
    static func checkAuthenticationTime(_ claims: JSONValue, issuedAt iat: Int64, recency: AuthenticationRecency)
        throws(IdentityError)
    {
        guard let authTime = try numericDate(claims, "auth_time"), authTime > 0 else {
            let what = claims["auth_time"] == nil ? "none" : "\(claims["auth_time"].flatMap(\.int64) ?? 0)"
            throw IdentityError.staleAuthentication(
                "the provider's ID token carries no usable auth_time (\(what)), so the broker cannot tell whether "
                    + "the person authenticated for this sign-in or was signed in from a browser session someone "
                    + "else left; on a shared device it refuses. The provider's administrator must have its ID "
                    + "tokens carry the time the person authenticated (OpenID Connect Core 2, auth_time); see "
                    + "docs/providers.md")
        }
        // Seconds, as Double: every value is below 9e15 (numericDate), far inside its exact range.
        let providerSpan = Double(iat) + 1 - Double(authTime)
        let signInSpan = Double(recency.tokenRequestAt - recency.startedAt) / 1_000_000
        guard providerSpan <= signInSpan + Double(recency.maxAge) else {
            let before = iat >= authTime ? "\(iat - authTime) s" : "an instant"
            let asked = recency.maxAgeSent ? "max_age=\(recency.maxAge) and prompt=login" : "prompt=login"
            throw IdentityError.staleAuthentication(
                "the provider signed the person in from an earlier browser session, without asking for their "
                    + "credentials: it says they authenticated \(before) before it issued the token, but this "
                    + "sign-in began only \(Int64(signInSpan.rounded(.down))) s before the token was asked for, and "
                    + "the broker asked for \(asked). On a shared device that session may be the last person's, so "
                    + "the sign-in was refused. Sign in again; if it persists, the provider ignores prompt=login "
                    + "and max_age (OpenID Connect Core 3.1.2.1): tell its administrator")
        }
    }

    // MARK: Helpers

    static func object(_ bytes: [UInt8], what: String) throws(IdentityError) -> JSONValue {
        do {
            return try JSONValue.providerObject(bytes, what: what)
        } catch {
            throw IdentityError.invalidIDToken("\(what) is not a JSON object")
        }
    }

    /// A NumericDate claim (RFC 7519, section 2): a JSON number of seconds; nil when absent.
    static func numericDate(_ claims: JSONValue, _ name: String) throws(IdentityError) -> Int64? {
        switch claims[name] {
        case nil:
            return nil
        case .number(let value)? where value.isFinite && abs(value) < 9e15:
            return Int64(value.rounded(.down))
        default:
            throw IdentityError.invalidIDToken("its \(name) claim is not a number of seconds")
        }
    }

    static func verify(_ signature: [UInt8], digest: SHA256.Digest, with key: JSONWebKey) -> Bool {
        switch key.material {
        case .p256(let publicKey):
            // JWS ES256 signatures are r || s, 32 bytes each (RFC 7518, section 3.4), not DER.
            guard signature.count == 64,
                let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature)
            else { return false }
            return publicKey.isValidSignature(ecdsa, for: digest)
        case .rsa(let publicKey):
            guard signature.count == (publicKey.keySizeInBits + 7) / 8 else { return false }
            return publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature),
                for: digest, padding: .insecurePKCS1v1_5)
        }
    }

    /// JWA names (RFC 7518, 7797, 8037) that may be quoted back in a message.
    static let registeredAlgorithms: Set<String> = [
        "HS256", "HS384", "HS512", "RS384", "RS512", "ES384", "ES512", "ES256K",
        "PS256", "PS384", "PS512", "EdDSA", "Ed25519", "Ed448",
    ]
}

/// Strict base64url without padding (RFC 7515, section 2 and appendix C).
public enum Base64URL {
    static func decode(_ text: Substring) -> [UInt8]? {
        decode(text.utf8)
    }

    static func decode<Bytes: Collection>(_ text: Bytes) -> [UInt8]? where Bytes.Element == UInt8 {
        var output: [UInt8] = []
        output.reserveCapacity(text.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for character in text {
            let value: UInt32
            switch character {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(character - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(character - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(character - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            default: return nil
            }
            accumulator = (accumulator << 6) | value
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // A single leftover character (6 bits) cannot encode a byte.
        if bits >= 6 { return nil }
        return output
    }

    /// `bytes` in base64url, without padding.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var output: [UInt8] = []
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in bytes {
            accumulator = (accumulator << 8) | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(alphabet[Int((accumulator >> UInt32(bits)) & 63)])
            }
            accumulator &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 { output.append(alphabet[Int((accumulator << UInt32(6 - bits)) & 63)]) }
        return String(decoding: output, as: UTF8.self)
    }
}

/// What a sign-in asked of the person's authentication (`max_age`, whether the provider was sent
/// it or not), and the broker's two instants the check needs.
struct AuthenticationRecency: Sendable, Equatable {
    /// Seconds, as `max_age` says.
    var maxAge: Int64
    /// When the sign-in began, on the broker's clock (microseconds since the epoch).
    var startedAt: Int64
    /// When the token request that brought the ID token was sent, on the same clock.
    var tokenRequestAt: Int64
    /// Whether the provider was sent `max_age` (one that refuses it is asked with `prompt=login` alone).
    var maxAgeSent = true
}

extension Int64 {
    /// `self + other`, pinned to the type's range instead of trapping on provider-chosen values.
    fileprivate func addingClamped(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        if overflow { return other > 0 ? .max : .min }
        return sum
    }
}
