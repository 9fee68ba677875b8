import BrokerCore
import Crypto
import CryptoExtras
import Foundation
import Locking
import Testing

@testable import Identity

/// A clock the test sets.
final class TestClock: WallClock {
    private let seconds: Locked<Int64>
    init(_ start: Int64 = 1_750_000_000) { seconds = Locked(start) }
    func now() -> Int64 { seconds.withLock { $0 } }
    func advance(_ by: Int64) { seconds.withLock { $0 += by } }
}

/// A JWKS endpoint stand-in: serves whatever set the test puts in, counts the fetches,
/// and can be made slow or failing.
final class FakeJWKSEndpoint: Sendable {
    private struct State {
        var body: [UInt8]
        var fetches = 0
        var failure: IdentityError?
        var delay: Duration = .zero
    }
    private let state: Locked<State>

    init(_ body: String) { state = Locked(State(body: Array(body.utf8))) }

    var fetches: Int { state.withLock { $0.fetches } }
    func serve(_ body: String) { state.withLock { $0.body = Array(body.utf8) } }
    func fail(with error: IdentityError?) { state.withLock { $0.failure = error } }
    func setDelay(_ delay: Duration) { state.withLock { $0.delay = delay } }

    var fetch: JWKSCache.Fetch {
        { (url: String) async throws(IdentityError) -> [UInt8] in
            let (body, failure, delay) = self.state.withLock { state in
                state.fetches += 1
                return (state.body, state.failure, state.delay)
            }
            if delay > .zero { try? await Task.sleep(for: delay) }
            if let failure { throw failure }
            return body
        }
    }
}

/// A signing key on the provider's side, with its JWK.
struct TestSigner: Sendable {
    enum Key: Sendable {
        case ec(P256.Signing.PrivateKey)
        case rsa(_RSA.Signing.PrivateKey)
    }
    let kid: String?
    let key: Key

    static func ec(kid: String?) -> TestSigner { TestSigner(kid: kid, key: .ec(P256.Signing.PrivateKey())) }

    /// RSA key generation is slow; tests share a few.
    static let rsaKeys: [_RSA.Signing.PrivateKey] = (0..<2).map { _ in
        // swiftlint:disable:next force_try
        try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    }
    static func rsa(kid: String?, index: Int = 0) -> TestSigner { TestSigner(kid: kid, key: .rsa(rsaKeys[index])) }

    var alg: String {
        switch key {
        case .ec: return "ES256"
        case .rsa: return "RS256"
        }
    }

    /// The public JWK, as a JSON object's text.
    var jwk: String {
        var members: [String: Any] = ["use": "sig", "alg": alg]
        if let kid { members["kid"] = kid }
        switch key {
        case .ec(let privateKey):
            let point = [UInt8](privateKey.publicKey.x963Representation)  // 04 || x || y
            members["kty"] = "EC"
            members["crv"] = "P-256"
            members["x"] = b64url(point[1..<33])
            members["y"] = b64url(point[33..<65])
        case .rsa(let privateKey):
            let primitives = try? privateKey.publicKey.getKeyPrimitives()
            members["kty"] = "RSA"
            members["n"] = b64url(primitives?.modulus ?? Data())
            members["e"] = b64url(primitives?.publicExponent ?? Data())
        }
        return json(members)
    }

    /// Signs `header.payload`; the header gets `alg` and `kid` unless `header` overrides them.
    func token(_ claims: [String: Any], header extra: [String: Any] = [:]) -> String {
        var header: [String: Any] = ["typ": "JWT", "alg": alg]
        if let kid { header["kid"] = kid }
        for (name, value) in extra { header[name] = value }
        let input = b64url(Array(json(header).utf8)) + "." + b64url(Array(json(claims).utf8))
        return input + "." + b64url(sign(Array(input.utf8)))
    }

    func sign(_ input: [UInt8]) -> [UInt8] {
        switch key {
        case .ec(let privateKey):
            return (try? privateKey.signature(for: SHA256.hash(data: input)).rawRepresentation).map { [UInt8]($0) }
                ?? []
        case .rsa(let privateKey):
            return (try? privateKey.signature(for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5))
                .map { $0.withUnsafeBytes { [UInt8]($0) } } ?? []
        }
    }
}

func jwks(_ members: [String]) -> String { "{\"keys\":[" + members.joined(separator: ",") + "]}" }

func b64url<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
    Data(bytes).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

func json(_ object: [String: Any]) -> String {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
    return String(decoding: data, as: UTF8.self)
}

/// The shared fixture: one issuer, one client, a clock, a fake endpoint and a validator.
struct Fixture {
    static let issuer = "https://login.example.test/tenant-1/v2.0"
    static let clientId = "client-abc"
    let clock = TestClock()
    let endpoint: FakeJWKSEndpoint
    let cache: JWKSCache
    let validator: IDTokenValidator

    init(serving body: String, refetchInterval: Int64 = 60) {
        endpoint = FakeJWKSEndpoint(body)
        cache = JWKSCache(
            uri: "https://login.example.test/keys", clock: clock,
            minimumRefetchInterval: refetchInterval, fetch: endpoint.fetch)
        validator = IDTokenValidator(issuer: Self.issuer, jwks: cache, clock: clock)
    }

    /// Claims that pass every check; tests change one thing.
    func claims(_ changes: [String: Any?] = [:]) -> [String: Any] {
        let now = clock.now()
        var claims: [String: Any] = [
            "iss": Self.issuer, "aud": Self.clientId, "sub": "subject-123",
            "iat": now, "exp": now + 3600, "nbf": now, "nonce": "nonce-xyz",
            "preferred_username": "ada@example.test",
        ]
        for (name, value) in changes { claims[name] = value }
        return claims
    }

    func validate(_ token: String, nonce: String? = "nonce-xyz", clientId: String = Fixture.clientId)
        async throws(IdentityError) -> IdentityClaims
    {
        try await validator.validate(token, clientId: clientId, expectedNonce: nonce)
    }
}

/// The error `body` throws, or nil.
func identityError(_ body: () async throws -> Void) async -> IdentityError? {
    do {
        try await body()
        return nil
    } catch let error as IdentityError {
        return error
    } catch {
        Issue.record("not an IdentityError: \(error)")
        return nil
    }
}

extension IdentityError {
    var isInvalidIDToken: Bool {
        if case .invalidIDToken = self { return true }
        return false
    }
}
