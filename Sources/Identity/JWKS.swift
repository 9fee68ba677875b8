import BrokerCore
import Crypto
import CryptoExtras
import FoundationEssentials
import HTTP
import JSON
import Logging

/// The JWS algorithms the broker accepts for ID tokens (RFC 7518, section 3.1).
enum JWSAlgorithm: String, Sendable, CaseIterable {
    /// ECDSA with P-256 and SHA-256.
    case es256 = "ES256"
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    case rs256 = "RS256"
}

/// One verification key from a provider's JWK Set (RFC 7517), already turned into a crypto key.
struct JSONWebKey: Sendable {
    enum Material: Sendable {
        case p256(P256.Signing.PublicKey)
        case rsa(_RSA.Signing.PublicKey)
    }

    /// `kid`, when the set gives one.
    let kid: String?
    let material: Material

    /// The one algorithm this key verifies: ES256 for P-256, RS256 for RSA.
    var algorithm: JWSAlgorithm {
        switch material {
        case .p256: return .es256
        case .rsa: return .rs256
        }
    }
}

/// A parsed JWK Set: the keys the broker can use; everything else in the document is skipped.
struct JSONWebKeySet: Sendable {
    let keys: [JSONWebKey]

    /// RSA moduli above this are refused, so a hostile set cannot make each check arbitrarily slow.
    static let maximumRSABits = 8192

    /// Reads a JWK Set. Only the outer shape (`{"keys": [...]}`) is required; members that are
    /// malformed, of another type or curve, or not for signatures are skipped (RFC 7517, section 5).
    static func parse(_ bytes: [UInt8]) throws(IdentityError) -> JSONWebKeySet {
        let document = try JSONValue.providerObject(bytes, what: "the provider's signing keys (JWKS)")
        guard let members = document["keys"]?.array else {
            throw IdentityError.badResponse("the provider's signing keys (JWKS) have no keys array")
        }
        return JSONWebKeySet(keys: members.compactMap(key(from:)))
    }

    /// One member, or nil when the broker cannot use it.
    static func key(from member: JSONValue) -> JSONWebKey? {
        guard case .object = member, let kty = member["kty"]?.string else { return nil }
        // `use`, when present, must be "sig"; `key_ops`, when present, must allow "verify".
        if let use = member["use"], use.string != "sig" { return nil }
        if let operations = member["key_ops"] {
            guard let list = operations.array, list.contains(.string("verify")) else { return nil }
        }
        let kid: String?
        switch member["kid"] {
        case nil: kid = nil
        case .string(let value)?: kid = value
        default: return nil
        }
        // `alg`, when present, must be the algorithm the broker would use with this key type.
        let alg: String?
        switch member["alg"] {
        case nil: alg = nil
        case .string(let value)?: alg = value
        default: return nil
        }
        let material: JSONWebKey.Material
        switch kty {
        case "EC":
            guard alg == nil || alg == JWSAlgorithm.es256.rawValue, member["crv"]?.string == "P-256",
                let x = decodedMember(member, "x"), let y = decodedMember(member, "y"),
                x.count == 32, y.count == 32,
                let key = try? P256.Signing.PublicKey(x963Representation: [0x04] + x + y)
            else { return nil }
            material = .p256(key)
        case "RSA":
            guard alg == nil || alg == JWSAlgorithm.rs256.rawValue,
                let n = decodedMember(member, "n"), let e = decodedMember(member, "e"),
                !n.isEmpty, !e.isEmpty, e.count <= 8,
                n.count <= maximumRSABits / 8 + 1,
                let key = try? _RSA.Signing.PublicKey(n: n, e: e),
                key.keySizeInBits <= maximumRSABits
            else { return nil }
            material = .rsa(key)
        default:
            return nil
        }
        return JSONWebKey(kid: kid, material: material)
    }

    private static func decodedMember(_ member: JSONValue, _ name: String) -> [UInt8]? {
        guard let text = member[name]?.string else { return nil }
        return Base64URL.decode(Substring(text))
    }

    /// What a lookup found.
    enum Lookup: Sendable {
        case found(JSONWebKey)
        /// The `kid` names a key, but of another type than the token's `alg`.
        case wrongAlgorithm
        /// No `kid` was given and the set has several keys for the algorithm.
        case ambiguous
        case notFound
    }

    /// The key for `kid` and `alg`; without a `kid`, the only key for `alg`, if there is exactly one.
    func lookup(kid: String?, algorithm: JWSAlgorithm) -> Lookup {
        guard let kid else {
            let candidates = keys.filter { $0.algorithm == algorithm }
            switch candidates.count {
            case 0: return .notFound
            case 1: return .found(candidates[0])
            default: return .ambiguous
            }
        }
        let named = keys.filter { $0.kid == kid }
        if let key = named.first(where: { $0.algorithm == algorithm }) { return .found(key) }
        return named.isEmpty ? .notFound : .wrongAlgorithm
    }
}

/// The provider's signing keys, fetched from `jwks_uri` on first use and kept.
///
/// - A `kid` the cached set does not have triggers one refetch (the provider may have rotated
///   its keys), but such refetches happen at most once per `minimumRefetchInterval` seconds, so a
///   stream of tokens naming unknown keys cannot make the broker hammer the provider. A set
///   fetched for the lookup itself is not fetched again.
/// - A set older than `maximumAge` is refetched on the next use, so keys the provider withdrew
///   stop being trusted.
/// - Concurrent lookups share one fetch. A failed fetch is not remembered; when no set is cached
///   yet, the next lookup tries again.
actor JWKSCache {
    typealias Fetch = @Sendable (String) async throws(IdentityError) -> [UInt8]

    /// The `jwks_uri` from discovery.
    nonisolated let uri: String
    private let fetch: Fetch
    private let clock: any WallClock
    private let minimumRefetchInterval: Int64
    private let maximumAge: Int64
    private let logger: Logger?

    private var cached: JSONWebKeySet?
    /// When the cached set was fetched.
    private var fetchedAt: Int64 = 0
    /// When the last fetch for an unknown `kid` started, successful or not.
    private var lastUnknownKeyFetch: Int64?
    private var inFlight: Task<Result<JSONWebKeySet, IdentityError>, Never>?

    /// How many fetches have started; for tests and diagnostics.
    private(set) var fetchCount = 0

    /// A cache that gets the set's bytes from `fetch` (tests inject one).
    init(
        uri: String, clock: any WallClock, minimumRefetchInterval: Int64 = 60, maximumAge: Int64 = 86_400,
        logger: Logger? = nil, fetch: @escaping Fetch
    ) {
        self.uri = uri
        self.fetch = fetch
        self.clock = clock
        self.minimumRefetchInterval = minimumRefetchInterval
        self.maximumAge = maximumAge
        self.logger = logger
    }

    /// A cache that GETs `uri` with `http`.
    init(
        uri: String, http: HTTPClient, clock: any WallClock, minimumRefetchInterval: Int64 = 60,
        maximumAge: Int64 = 86_400, logger: Logger? = nil
    ) {
        self.init(
            uri: uri, clock: clock, minimumRefetchInterval: minimumRefetchInterval, maximumAge: maximumAge,
            logger: logger,
            fetch: { (url: String) async throws(IdentityError) -> [UInt8] in
                try await Self.get(url, with: http)
            })
    }

    /// A cache that GETs `uri` through the provider's requester: the retry policy and the call's budget apply.
    init(
        uri: String, requester: ProviderHTTP, clock: any WallClock, minimumRefetchInterval: Int64 = 60,
        maximumAge: Int64 = 86_400, logger: Logger? = nil
    ) {
        self.init(
            uri: uri, clock: clock, minimumRefetchInterval: minimumRefetchInterval, maximumAge: maximumAge,
            logger: logger,
            fetch: { (url: String) async throws(IdentityError) -> [UInt8] in
                try await Self.get(url, with: requester)
            })
    }

    /// Makes sure a current set is cached, fetching it if not, so a grant that spends a one-time
    /// token is not sent while its answer could not be checked.
    func prefetch() async throws(IdentityError) {
        let now = clock.now()
        if cached != nil, now - fetchedAt < maximumAge, now >= fetchedAt { return }
        _ = try await refresh()
    }

    /// The key that verifies a token whose header names `kid` (or none) and `algorithm`.
    ///
    /// - Throws: ``IdentityError/invalidIDToken(_:)`` when the provider publishes no such key;
    ///   ``IdentityError/unreachable(_:)`` or ``IdentityError/badResponse(_:)`` when the set could not be fetched.
    func key(kid: String?, algorithm: JWSAlgorithm) async throws(IdentityError) -> JSONWebKey {
        let now = clock.now()
        let set: JSONWebKeySet
        let fresh: Bool
        if let cached, now - fetchedAt < maximumAge, now >= fetchedAt {
            set = cached
            fresh = false
        } else {
            set = try await refresh()
            fresh = true
        }
        var result = set.lookup(kid: kid, algorithm: algorithm)
        // A set fetched for this very lookup is not fetched again.
        if case .notFound = result, !fresh, mayRefetchForUnknownKey(now: clock.now()) {
            logger?.info("an ID token names a signing key not in the cached set; fetching the set again")
            result = try await refresh(forUnknownKey: true).lookup(kid: kid, algorithm: algorithm)
        }
        switch result {
        case .found(let key):
            return key
        case .wrongAlgorithm:
            throw IdentityError.invalidIDToken("its algorithm does not match the type of the provider's key it names")
        case .ambiguous:
            throw IdentityError.invalidIDToken("it names no signing key (kid) and the provider publishes several")
        case .notFound:
            if kid == nil {
                throw IdentityError.invalidIDToken(
                    "it names no signing key (kid) and the provider publishes none for its algorithm")
            }
            throw IdentityError.invalidIDToken("it is signed with a key the provider does not publish")
        }
    }

    /// Whether an unknown `kid` may trigger a fetch now: not within `minimumRefetchInterval` of
    /// the last such fetch. A clock that went backwards allows one.
    private func mayRefetchForUnknownKey(now: Int64) -> Bool {
        if inFlight != nil { return true }  // joining a fetch under way costs nothing
        guard let lastUnknownKeyFetch else { return true }
        return now - lastUnknownKeyFetch >= minimumRefetchInterval || now < lastUnknownKeyFetch
    }

    /// Fetches the set, or joins the fetch already under way.
    private func refresh(forUnknownKey: Bool = false) async throws(IdentityError) -> JSONWebKeySet {
        let task: Task<Result<JSONWebKeySet, IdentityError>, Never>
        if let inFlight {
            task = inFlight
        } else {
            if forUnknownKey { lastUnknownKeyFetch = clock.now() }
            fetchCount += 1
            let fetch = self.fetch
            let uri = self.uri
            task = Task {
                do throws(IdentityError) {
                    return .success(try JSONWebKeySet.parse(try await fetch(uri)))
                } catch {
                    return .failure(error)
                }
            }
            inFlight = task
        }
        let result = await task.value
        if inFlight == task {
            inFlight = nil
            if case .success(let set) = result {
                cached = set
                fetchedAt = clock.now()
                logger?.debug("provider signing keys fetched", metadata: ["keys": "\(set.keys.count)"])
            }
        }
        return try result.get()
    }

    /// The production fetch: one GET, the body capped, transport failures as `.unreachable`.
    static func get(_ url: String, with http: HTTPClient) async throws(IdentityError) -> [UInt8] {
        _ = try Authority.checkedHost(of: url)
        var request = HTTPRequest.get(url, headers: [HTTPHeader("Accept", "application/json")])
        request.maxResponseBytes = maximumBytes
        let response: HTTPResponse
        do {
            response = try await http.send(request)
        } catch {
            throw IdentityError.unreachable(error)
        }
        guard response.status == 200 else {
            if response.status >= 500 {
                throw IdentityError.oauth(
                    status: response.status, error: "server_error",
                    description: "the signing-key endpoint answered \(response.status)",
                    codes: [], suberror: nil)
            }
            throw IdentityError.badResponse("\(Authority.redacted(url)) answered \(response.status)")
        }
        return response.body
    }

    /// The fetch through the provider's requester: one GET with retries, the body capped.
    static func get(_ url: String, with requester: ProviderHTTP) async throws(IdentityError) -> [UInt8] {
        _ = try Authority.checkedHost(of: url)
        var request = HTTPRequest.get(url, headers: [HTTPHeader("Accept", "application/json")])
        request.maxResponseBytes = maximumBytes
        let response = try await requester.send(request, what: "the signing keys (JWKS)", replay: .idempotent)
        guard response.status == 200 else {
            throw IdentityError.badResponse("\(Authority.redacted(url)) answered HTTP \(response.status)")
        }
        return response.body
    }

    /// A JWK Set is a few kilobytes; Entra's, with certificate chains, is under 20 KiB.
    static let maximumBytes = 256 * 1024
}
