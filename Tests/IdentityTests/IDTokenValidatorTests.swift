import Crypto
import Foundation
import Testing

@testable import Identity

@Suite struct IDTokenValidatorTests {
    // MARK: Accepted

    @Test func validES256TokenIsAccepted() async throws {
        let signer = TestSigner.ec(kid: "ec-1")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let claims = try await fixture.validate(signer.token(fixture.claims()))
        #expect(claims.claims["sub"]?.string == "subject-123")
        #expect(claims.claims["preferred_username"]?.string == "ada@example.test")
        #expect(fixture.endpoint.fetches == 1)
    }

    @Test func validRS256TokenIsAccepted() async throws {
        let signer = TestSigner.rsa(kid: "rsa-1")
        let fixture = Fixture(serving: jwks([TestSigner.ec(kid: "ec-1").jwk, signer.jwk]))
        let claims = try await fixture.validate(signer.token(fixture.claims()))
        #expect(claims.claims["sub"]?.string == "subject-123")
    }

    @Test func keysAreFetchedOnceForManyTokens() async throws {
        let signer = TestSigner.ec(kid: "ec-1")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        for _ in 0..<5 { _ = try await fixture.validate(signer.token(fixture.claims())) }
        #expect(fixture.endpoint.fetches == 1)
    }

    @Test func tokenWithoutKidUsesTheOnlyKey() async throws {
        let signer = TestSigner.ec(kid: nil)
        let fixture = Fixture(
            serving: jwks([TestSigner.ec(kid: "ec-1").jwk.replacingOccurrences(of: "\"kid\":\"ec-1\",", with: "")]))
        // The set's only key is another one: the signature must fail, not the lookup.
        let error = await identityError { _ = try await fixture.validate(signer.token(fixture.claims())) }
        #expect(error == .invalidIDToken("its signature does not verify with the provider's key"))

        let second = Fixture(serving: jwks([signer.jwk]))
        _ = try await second.validate(signer.token(second.claims()))
    }

    @Test func tokenWithoutKidIsRejectedWhenTheSetHasSeveralKeys() async {
        let signer = TestSigner.ec(kid: nil)
        let fixture = Fixture(serving: jwks([signer.jwk, TestSigner.ec(kid: nil).jwk]))
        let error = await identityError { _ = try await fixture.validate(signer.token(fixture.claims())) }
        #expect(error?.isInvalidIDToken == true)
    }

    // MARK: Signature

    @Test func tokenSignedByAnotherKeyWithTheSameKidIsRejected() async {
        let published = TestSigner.ec(kid: "ec-1")
        let forger = TestSigner.ec(kid: "ec-1")
        let fixture = Fixture(serving: jwks([published.jwk]))
        let error = await identityError { _ = try await fixture.validate(forger.token(fixture.claims())) }
        #expect(error == .invalidIDToken("its signature does not verify with the provider's key"))
        // A forged signature is not an unknown key: no refetch.
        #expect(fixture.endpoint.fetches == 1)

        let rsaFixture = Fixture(serving: jwks([TestSigner.rsa(kid: "rsa-1", index: 0).jwk]))
        let rsaError = await identityError {
            _ = try await rsaFixture.validate(TestSigner.rsa(kid: "rsa-1", index: 1).token(rsaFixture.claims()))
        }
        #expect(rsaError == .invalidIDToken("its signature does not verify with the provider's key"))
    }

    @Test(arguments: ["ES256", "RS256"])
    func tamperedPayloadIsRejected(alg: String) async {
        let signer = alg == "ES256" ? TestSigner.ec(kid: "k") : TestSigner.rsa(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let token = signer.token(fixture.claims())
        let parts = token.split(separator: ".").map(String.init)
        let forgedPayload = b64url(Array(json(fixture.claims(["sub": "someone-else"])).utf8))
        let tampered = [parts[0], forgedPayload, parts[2]].joined(separator: ".")
        let error = await identityError { _ = try await fixture.validate(tampered) }
        #expect(error == .invalidIDToken("its signature does not verify with the provider's key"))
    }

    @Test func truncatedOrDERSignaturesAreRejected() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let token = signer.token(fixture.claims())
        let parts = token.split(separator: ".").map(String.init)
        let input = Array((parts[0] + "." + parts[1]).utf8)
        guard case .ec(let key) = signer.key,
            let der = try? key.signature(for: SHA256.hash(data: input)).derRepresentation
        else {
            Issue.record("could not sign")
            return
        }
        for signature in [b64url(der), String(parts[2].dropLast(4)), ""] {
            let error = await identityError {
                _ = try await fixture.validate(parts[0] + "." + parts[1] + "." + signature)
            }
            #expect(error?.isInvalidIDToken == true)
        }
    }

    @Test func unsignedAndHMACTokensAreRejected() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let claims = b64url(Array(json(fixture.claims()).utf8))

        let none = b64url(Array(json(["alg": "none", "kid": "k"]).utf8)) + "." + claims + "."
        #expect(
            await identityError { _ = try await fixture.validate(none) }
                == .invalidIDToken("it is not signed (alg none)"))

        // HS256 keyed with the public key's bytes: the classic algorithm-confusion forgery.
        let hsHeader = b64url(Array(json(["alg": "HS256", "kid": "k"]).utf8))
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array((hsHeader + "." + claims).utf8),
            using: SymmetricKey(data: Array(signer.jwk.utf8)))
        let hs = hsHeader + "." + claims + "." + b64url(Array(mac))
        #expect(
            await identityError { _ = try await fixture.validate(hs) }
                == .invalidIDToken("it is signed with HS256; the broker accepts ES256 and RS256 only"))

        for header in [
            ["alg": "PS256", "kid": "k"], ["alg": "es256", "kid": "k"], ["kid": "k"], ["alg": "ES256", "kid": 7],
        ] as [[String: Any]] {
            let token = b64url(Array(json(header).utf8)) + "." + claims + "." + b64url([1, 2, 3])
            let error = await identityError { _ = try await fixture.validate(token) }
            #expect(error?.isInvalidIDToken == true)
        }
        // None of these needed the keys beyond the first look-up.
        #expect(fixture.endpoint.fetches <= 1)
    }

    @Test func algorithmThatDoesNotMatchTheKeyTypeIsRejected() async {
        let ec = TestSigner.ec(kid: "shared")
        let fixture = Fixture(serving: jwks([ec.jwk]))
        // An RS256 token naming an EC key.
        let rsa = TestSigner.rsa(kid: "shared")
        let error = await identityError { _ = try await fixture.validate(rsa.token(fixture.claims())) }
        #expect(error == .invalidIDToken("its algorithm does not match the type of the provider's key it names"))
        #expect(fixture.endpoint.fetches == 1)
    }

    @Test func criticalHeaderExtensionsAreRejected() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let token = signer.token(fixture.claims(), header: ["crit": ["exp"], "exp": 1])
        let error = await identityError { _ = try await fixture.validate(token) }
        #expect(error?.isInvalidIDToken == true)
    }

    @Test func malformedTokensAreRejected() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let good = signer.token(fixture.claims())
        let parts = good.split(separator: ".").map(String.init)
        let notJSON = b64url(Array("not json".utf8))
        let cases = [
            "", "abc", parts[0] + "." + parts[1], good + ".extra",
            parts[0] + "=." + parts[1] + "." + parts[2],  // padding
            parts[0] + "." + parts[1] + "+" + "." + parts[2],  // standard base64 alphabet
            notJSON + "." + parts[1] + "." + parts[2],
            b64url(Array("[1,2]".utf8)) + "." + parts[1] + "." + parts[2],
        ]
        for token in cases {
            let error = await identityError { _ = try await fixture.validate(token) }
            #expect(error?.isInvalidIDToken == true, "token shape \(token.count) chars")
        }
        // A payload that is not JSON, correctly signed.
        let header = parts[0]
        let input = header + "." + notJSON
        let signedGarbage = input + "." + b64url(signer.sign(Array(input.utf8)))
        #expect(
            await identityError { _ = try await fixture.validate(signedGarbage) }
                == .invalidIDToken("its payload is not a JSON object"))
    }

    /// A claim given twice reads one way to a reader that keeps the first (JSONDecoder did) and
    /// another way to one that keeps the last (RFC 7519 allows either): the token is refused.
    @Test func aClaimGivenTwiceIsRejected() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let good = signer.token(fixture.claims())
        #expect(await identityError { _ = try await fixture.validate(good) } == nil)
        let payload = "{\"sub\":\"someone-else\"," + json(fixture.claims()).dropFirst()
        let input = good.split(separator: ".")[0] + "." + b64url(Array(payload.utf8))
        let twice = input + "." + b64url(signer.sign(Array(input.utf8)))
        #expect(
            await identityError { _ = try await fixture.validate(twice) }
                == .invalidIDToken("its payload is not a JSON object"))
    }

    // MARK: Claims

    @Test func wrongIssuerIsRejected() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        for issuer: Any? in [
            "https://evil.example.test/tenant-1/v2.0", Fixture.issuer + "/", Fixture.issuer.uppercased(), nil, 42,
        ] {
            let error = await identityError {
                _ = try await fixture.validate(signer.token(fixture.claims(["iss": issuer])))
            }
            #expect(error?.isInvalidIDToken == true)
        }
    }

    @Test func audienceMustBeTheClient() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let rejected: [Any?] = ["other-client", ["other-client", "third"], [], nil, 5, [Fixture.clientId, 5]]
        for aud in rejected {
            let error = await identityError {
                _ = try await fixture.validate(signer.token(fixture.claims(["aud": aud])))
            }
            #expect(error?.isInvalidIDToken == true)
        }
        _ = try await fixture.validate(signer.token(fixture.claims(["aud": [Fixture.clientId]])))
        _ = try await fixture.validate(signer.token(fixture.claims(["aud": ["api://other", Fixture.clientId]])))
        _ = try await fixture.validate(
            signer.token(fixture.claims(["aud": ["api://other", Fixture.clientId], "azp": Fixture.clientId])))
        // The client id is matched exactly.
        let error = await identityError {
            _ = try await fixture.validate(signer.token(fixture.claims()), clientId: "CLIENT-ABC")
        }
        #expect(error?.isInvalidIDToken == true)
    }

    @Test func authorizedPartyMustBeTheClientWhenThereAreSeveralAudiences() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let error = await identityError {
            _ = try await fixture.validate(
                signer.token(fixture.claims(["aud": ["api://other", Fixture.clientId], "azp": "api://other"])))
        }
        #expect(error?.isInvalidIDToken == true)
        // A single audience: azp is not checked (OIDC Core errata 2).
        _ = try await fixture.validate(signer.token(fixture.claims(["azp": "some-other-party"])))
    }

    @Test func expiryIsCheckedWithTheSkew() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        // Expired 10 minutes ago: beyond the 5-minute skew.
        let expired = await identityError {
            _ = try await fixture.validate(
                signer.token(fixture.claims(["iat": now - 4200, "nbf": now - 4200, "exp": now - 600])))
        }
        #expect(expired?.isInvalidIDToken == true)
        // Exactly at the edge of the skew is expired too.
        let edge = await identityError {
            _ = try await fixture.validate(signer.token(fixture.claims(["exp": now - 300])))
        }
        #expect(edge?.isInvalidIDToken == true)
        // Expired 2 minutes ago: within the skew.
        _ = try await fixture.validate(signer.token(fixture.claims(["iat": now - 3720, "exp": now - 120])))
        // exp missing, a string, absurd.
        for exp: Any? in [nil, "\(now + 3600)", 1e300, true] {
            let error = await identityError {
                _ = try await fixture.validate(signer.token(fixture.claims(["exp": exp])))
            }
            #expect(error?.isInvalidIDToken == true)
        }
    }

    @Test func issueTimeAndNotBeforeAreCheckedWithTheSkew() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        let rejected: [[String: Any?]] = [
            ["iat": now + 3600, "exp": now + 7200],  // issued an hour from now
            ["nbf": now + 600],  // not valid for 10 minutes
            ["iat": nil],  // iat is required
            ["nbf": "soon"],
        ]
        for changes in rejected {
            let error = await identityError { _ = try await fixture.validate(signer.token(fixture.claims(changes))) }
            #expect(error?.isInvalidIDToken == true)
        }
        _ = try await fixture.validate(signer.token(fixture.claims(["iat": now + 120, "nbf": now + 120])))
        _ = try await fixture.validate(signer.token(fixture.claims(["nbf": nil])))
    }

    @Test func customSkewIsHonoured() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let strict = IDTokenValidator(
            issuer: Fixture.issuer, jwks: fixture.cache, clock: fixture.clock, allowedClockSkew: 0)
        let now = fixture.clock.now()
        let error = await identityError {
            _ = try await strict.validate(
                signer.token(fixture.claims(["exp": now - 1])), clientId: Fixture.clientId, expectedNonce: nil)
        }
        #expect(error?.isInvalidIDToken == true)
        _ = try await strict.validate(
            signer.token(fixture.claims(["exp": now + 1])), clientId: Fixture.clientId, expectedNonce: nil)
    }

    @Test func nonceMustMatchWhenOneWasSent() async throws {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let missing = await identityError {
            _ = try await fixture.validate(signer.token(fixture.claims(["nonce": nil])))
        }
        #expect(missing == .invalidIDToken("it carries no nonce, but the sign-in sent one"))
        let wrong = await identityError {
            _ = try await fixture.validate(signer.token(fixture.claims(["nonce": "replayed"])))
        }
        #expect(wrong == .invalidIDToken("its nonce is not the one the sign-in sent"))
        let notString = await identityError {
            _ = try await fixture.validate(signer.token(fixture.claims(["nonce": 1])))
        }
        #expect(notString?.isInvalidIDToken == true)
        _ = try await fixture.validate(signer.token(fixture.claims()))
        // No nonce sent (password, refresh): whatever the token carries is fine.
        _ = try await fixture.validate(signer.token(fixture.claims()), nonce: nil)
        _ = try await fixture.validate(signer.token(fixture.claims(["nonce": nil])), nonce: nil)
    }

    @Test func subjectIsRequired() async {
        let signer = TestSigner.ec(kid: "k")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        for sub: Any? in [nil, "", 17] {
            let error = await identityError {
                _ = try await fixture.validate(signer.token(fixture.claims(["sub": sub])))
            }
            #expect(error?.isInvalidIDToken == true)
        }
    }

    // MARK: Privacy

    @Test func errorMessagesNeverQuoteTheToken() async {
        let signer = TestSigner.ec(kid: "kid-SECRETKID")
        let forger = TestSigner.ec(kid: "kid-SECRETKID")
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        let marker = "SECRETVALUE"
        let tokens: [String] = [
            forger.token(fixture.claims(["sub": marker])),
            signer.token(fixture.claims(["iss": "https://\(marker).example"])),
            signer.token(fixture.claims(["aud": marker])),
            signer.token(fixture.claims(["aud": [marker, Fixture.clientId], "azp": marker])),
            signer.token(fixture.claims(["exp": now - 1000, "sub": marker])),
            signer.token(fixture.claims(["nonce": marker])),
            signer.token(fixture.claims(["exp": marker])),
            signer.token(fixture.claims(), header: ["alg": marker]),
            signer.token(fixture.claims(), header: ["kid": marker]),
            signer.token(fixture.claims(), header: ["crit": [marker]]),
            b64url(Array("{\"alg\":\"\(marker)\"".utf8)) + ".e30.AAAA",
        ]
        for token in tokens {
            let error = await identityError { _ = try await fixture.validate(token) }
            guard let error else {
                Issue.record("a bad token was accepted")
                continue
            }
            let text = "\(error)"
            #expect(error.isInvalidIDToken)
            #expect(!text.contains(marker))
            #expect(!text.contains("SECRETKID"))
            for part in token.split(separator: ".") where part.count > 3 {
                #expect(!text.contains(part))
            }
        }
    }
}
