import Foundation
import HTTP
import Testing

@testable import Identity

@Suite struct JWKSTests {
    // MARK: Parsing

    @Test func malformedAndUnusableMembersAreSkipped() throws {
        let good = TestSigner.ec(kid: "good")
        let rsa = TestSigner.rsa(kid: "rsa")
        let members = [
            "17", "\"key\"", "null", "[]", "{}",
            #"{"kty":"EC","crv":"P-256","kid":"no-x","y":"AAAA"}"#,
            #"{"kty":"EC","crv":"P-256","kid":"bad-b64","x":"!!!","y":"@@@"}"#,
            #"{"kty":"EC","crv":"P-256","kid":"short","x":"AAAA","y":"AAAA"}"#,
            #"{"kty":"EC","crv":"P-384","kid":"p384","x":"AAAA","y":"AAAA"}"#,
            #"{"kty":"oct","kid":"hmac","k":"c2VjcmV0"}"#,
            #"{"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
            #"{"kty":"RSA","kid":"tiny","n":"AQAB","e":"AQAB"}"#,
            #"{"kty":"RSA","kid":"no-e","n":"AQAB"}"#,
            #"{"kty":7,"kid":"kty-number"}"#,
            // Usable material, but flagged for something else.
            good.jwk.replacingOccurrences(of: #""use":"sig""#, with: #""use":"enc""#).replacingOccurrences(
                of: #""kid":"good""#, with: #""kid":"enc""#),
            good.jwk.replacingOccurrences(of: #""alg":"ES256""#, with: #""alg":"ES384""#).replacingOccurrences(
                of: #""kid":"good""#, with: #""kid":"es384""#),
            rsa.jwk.replacingOccurrences(of: #""alg":"RS256""#, with: #""alg":"PS256""#).replacingOccurrences(
                of: #""kid":"rsa""#, with: #""kid":"ps256""#),
            good.jwk.replacingOccurrences(of: #""kid":"good""#, with: #""kid":5"#),
            good.jwk.replacingOccurrences(of: #""kid":"good""#, with: #""kid":"ops","key_ops":["encrypt"]"#),
            // The two usable ones.
            good.jwk, rsa.jwk,
        ]
        let set = try JSONWebKeySet.parse(Array(jwks(members).utf8))
        #expect(set.keys.map(\.kid) == ["good", "rsa"])
        #expect(set.keys.map(\.algorithm) == [.es256, .rs256])
    }

    @Test func aSetThatIsNotAKeySetIsABadResponse() {
        for body in ["", "[]", "{\"keys\":{}}", "{\"nokeys\":[]}", "<html>"] {
            #expect(throws: IdentityError.self) { _ = try JSONWebKeySet.parse(Array(body.utf8)) }
        }
        #expect((try? JSONWebKeySet.parse(Array("{\"keys\":[]}".utf8)))?.keys.isEmpty == true)
    }

    @Test func keySetWithoutTheKeyRejectsTheToken() async {
        let signer = TestSigner.ec(kid: "missing")
        let fixture = Fixture(serving: jwks([TestSigner.ec(kid: "other").jwk]))
        let error = await identityError { _ = try await fixture.validate(signer.token(fixture.claims())) }
        #expect(error == .invalidIDToken("it is signed with a key the provider does not publish"))

        let empty = Fixture(serving: jwks([]))
        let emptyError = await identityError { _ = try await empty.validate(signer.token(empty.claims())) }
        #expect(emptyError == .invalidIDToken("it is signed with a key the provider does not publish"))
    }

    @Test func base64URLIsStrict() {
        #expect(Base64URL.decode("") == [])
        #expect(Base64URL.decode("AQAB") == [1, 0, 1])
        #expect(Base64URL.decode("_-8") == [0xFF, 0xEF])
        #expect(Base64URL.decode("AQ") == [1])
        #expect(Base64URL.decode("AQ==") == nil)
        #expect(Base64URL.decode("A") == nil)
        #expect(Base64URL.decode("+/8") == nil)
        #expect(Base64URL.decode("AQ AB") == nil)
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.encode(bytes) == b64url(bytes))
            #expect(Base64URL.decode(Substring(b64url(bytes))) == bytes)
        }
    }

    // MARK: Cache: rotation and rate limit

    @Test func unknownKidRefetchesOnceAndFindsTheRotatedKey() async throws {
        let old = TestSigner.ec(kid: "2024")
        let new = TestSigner.ec(kid: "2025")
        let fixture = Fixture(serving: jwks([old.jwk]))
        _ = try await fixture.validate(old.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 1)

        fixture.endpoint.serve(jwks([old.jwk, new.jwk]))
        _ = try await fixture.validate(new.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 2)
        // Both keys are cached now.
        _ = try await fixture.validate(old.token(fixture.claims()))
        _ = try await fixture.validate(new.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 2)
    }

    @Test func unknownKidsAreRateLimited() async throws {
        let known = TestSigner.ec(kid: "known")
        let fixture = Fixture(serving: jwks([known.jwk]), refetchInterval: 60)
        _ = try await fixture.validate(known.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 1)

        // A stream of tokens with unknown kids: the first makes one refetch, the rest are
        // refused without asking the provider.
        fixture.clock.advance(61)
        for index in 0..<10 {
            let forged = TestSigner.ec(kid: "forged-\(index)")
            let error = await identityError { _ = try await fixture.validate(forged.token(fixture.claims())) }
            #expect(error == .invalidIDToken("it is signed with a key the provider does not publish"))
        }
        #expect(fixture.endpoint.fetches == 2)

        // Within the interval, even a genuinely rotated key waits.
        let rotated = TestSigner.ec(kid: "rotated")
        fixture.endpoint.serve(jwks([known.jwk, rotated.jwk]))
        fixture.clock.advance(30)
        let early = await identityError { _ = try await fixture.validate(rotated.token(fixture.claims())) }
        #expect(early?.isInvalidIDToken == true)
        #expect(fixture.endpoint.fetches == 2)

        // Once the interval has passed, one more refetch finds it.
        fixture.clock.advance(31)
        _ = try await fixture.validate(rotated.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 3)
    }

    @Test func unknownKidTwiceInARowRefetchesOnlyOnce() async {
        let fixture = Fixture(serving: jwks([TestSigner.ec(kid: "a").jwk]))
        let stranger = TestSigner.ec(kid: "b")
        // First use: the set is fetched for this lookup, so it is not fetched again at once.
        var error = await identityError { _ = try await fixture.validate(stranger.token(fixture.claims())) }
        #expect(error?.isInvalidIDToken == true)
        #expect(fixture.endpoint.fetches == 1)
        // Unknown kid against the cached set: one refetch.
        error = await identityError { _ = try await fixture.validate(stranger.token(fixture.claims())) }
        #expect(error?.isInvalidIDToken == true)
        #expect(fixture.endpoint.fetches == 2)
        // And again, within the interval: none.
        fixture.clock.advance(59)
        error = await identityError { _ = try await fixture.validate(stranger.token(fixture.claims())) }
        #expect(error == .invalidIDToken("it is signed with a key the provider does not publish"))
        #expect(fixture.endpoint.fetches == 2)
    }

    @Test func staleSetIsRefetched() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        _ = try await fixture.validate(signer.token(fixture.claims()))
        fixture.clock.advance(86_400)
        // The provider withdrew the key: after a day the cache no longer trusts it.
        fixture.endpoint.serve(jwks([TestSigner.ec(kid: "next").jwk]))
        let error = await identityError { _ = try await fixture.validate(signer.token(fixture.claims())) }
        #expect(error?.isInvalidIDToken == true)
        #expect(fixture.endpoint.fetches == 2)
    }

    @Test func clockGoingBackwardsDoesNotBlockRotationForever() async throws {
        let old = TestSigner.ec(kid: "old")
        let fixture = Fixture(serving: jwks([old.jwk]))
        _ = try await fixture.validate(old.token(fixture.claims()))
        fixture.clock.advance(-3600)
        let new = TestSigner.ec(kid: "new")
        fixture.endpoint.serve(jwks([new.jwk]))
        _ = try await fixture.validate(new.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 2)
    }

    // MARK: Cache: concurrency and failures

    @Test func concurrentValidationsShareOneFetch() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        fixture.endpoint.setDelay(.milliseconds(200))
        let token = signer.token(fixture.claims())
        let accepted = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<32 {
                group.addTask { (try? await fixture.validate(token)) != nil }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(accepted == 32)
        #expect(fixture.endpoint.fetches == 1)
    }

    @Test func concurrentUnknownKidsShareOneRefetch() async throws {
        let old = TestSigner.ec(kid: "old")
        let new = TestSigner.ec(kid: "new")
        let fixture = Fixture(serving: jwks([old.jwk]))
        _ = try await fixture.validate(old.token(fixture.claims()))
        fixture.clock.advance(61)
        fixture.endpoint.serve(jwks([old.jwk, new.jwk]))
        fixture.endpoint.setDelay(.milliseconds(200))
        let token = new.token(fixture.claims())
        let accepted = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask { (try? await fixture.validate(token)) != nil }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(accepted == 16)
        #expect(fixture.endpoint.fetches == 2)
    }

    @Test func fetchFailuresPropagateAndAreRetriedLater() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        fixture.endpoint.fail(with: .unreachable(.couldNotConnect("GET https://login.example.test/keys")))
        let error = await identityError { _ = try await fixture.validate(signer.token(fixture.claims())) }
        #expect(error == .unreachable(.couldNotConnect("GET https://login.example.test/keys")))

        fixture.endpoint.fail(with: nil)
        fixture.endpoint.serve("<html>oops</html>")
        let bad = await identityError { _ = try await fixture.validate(signer.token(fixture.claims())) }
        if case .badResponse? = bad {} else { Issue.record("expected badResponse, got \(String(describing: bad))") }

        fixture.endpoint.serve(jwks([signer.jwk]))
        _ = try await fixture.validate(signer.token(fixture.claims()))
        #expect(fixture.endpoint.fetches == 3)
    }

    // MARK: Production fetch

    @Test func productionFetchMapsTransportFailuresToUnreachable() async {
        let clock = TestClock()
        // Port 1 on the loopback: nothing listens, the connection is refused.
        let cache = JWKSCache(uri: "http://127.0.0.1:1/keys", http: HTTPClient.shared, clock: clock)
        let error = await identityError { _ = try await cache.key(kid: "k", algorithm: .es256) }
        if case .unreachable? = error {} else { Issue.record("expected unreachable, got \(String(describing: error))") }
    }

    @Test func productionFetchRefusesPlainHTTPOffTheLoopback() async {
        let cache = JWKSCache(uri: "http://login.example.test/keys", http: HTTPClient.shared, clock: TestClock())
        let error = await identityError { _ = try await cache.key(kid: "k", algorithm: .es256) }
        #expect(error == .insecureURL("http://login.example.test/keys"))
    }
}
