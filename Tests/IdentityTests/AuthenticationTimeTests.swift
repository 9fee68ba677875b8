import Testing

@testable import Identity

/// OpenID Connect Core 3.1.2.1: a sign-in that asks for `max_age` gets an ID token with
/// `auth_time`, and the person authenticated within `max_age` of the request. In shared mode the
/// broker asks for `max_age=0`, so that a browser session left by the last person cannot sign
/// the next one in; these are the checks a provider that ignores it runs into.
@Suite struct AuthenticationTimeTests {
    private let signer = TestSigner.ec(kid: "ec-1")

    private func validate(_ fixture: Fixture, _ changes: [String: Any?], maxAge: Int64 = 0, requestedAt: Int64)
        async throws(IdentityError) -> IdentityClaims
    {
        try await fixture.validator.validate(
            signer.token(fixture.claims(changes)), clientId: Fixture.clientId, expectedNonce: "nonce-xyz",
            recency: AuthenticationRecency(maxAge: maxAge, requestedAt: requestedAt))
    }

    @Test func authenticationAfterTheRequestIsAccepted() async throws {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let requestedAt = fixture.clock.now() - 20
        _ = try await validate(fixture, ["auth_time": fixture.clock.now() - 5], requestedAt: requestedAt)
    }

    @Test func anEarlierBrowserSessionIsRefusedWithAnError() async {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        // The last person typed their password eight hours ago; the sign-in began a minute ago.
        let error = await identityError {
            _ = try await validate(fixture, ["auth_time": now - 8 * 3600], requestedAt: now - 60)
        }
        guard case .staleAuthentication(let text)? = error else {
            Issue.record("expected staleAuthentication, got \(String(describing: error))")
            return
        }
        #expect(text.contains("earlier browser session") && text.contains("28740 s before"), "\(text)")
        #expect(error?.brokerFailure(during: .signIn(.browser)).code == .accessDenied)
    }

    @Test func aMissingAuthTimeIsRefused() async {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let error = await identityError {
            _ = try await validate(fixture, [:], requestedAt: fixture.clock.now())
        }
        #expect(error?.isInvalidIDToken == true, "\(String(describing: error))")
    }

    @Test func theProvidersClockIsReadAgainstItsOwnIssueTime() async throws {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        // A provider ten minutes behind: the person authenticated 3 s before its iat, after the request.
        _ = try await validate(fixture, ["iat": now - 600, "auth_time": now - 603], requestedAt: now - 10)
        // Ten minutes ahead, and a session 20 minutes old: refused although auth_time > requestedAt.
        let error = await identityError {
            _ = try await validate(fixture, ["iat": now + 60, "auth_time": now + 60 - 1200], requestedAt: now - 10)
        }
        guard case .staleAuthentication? = error else {
            Issue.record("expected staleAuthentication, got \(String(describing: error))")
            return
        }
    }

    @Test func maxAgeAllowsThatManySeconds() async throws {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        _ = try await validate(fixture, ["auth_time": now - 250], maxAge: 300, requestedAt: now - 10)
        let error = await identityError {
            _ = try await validate(fixture, ["auth_time": now - 400], maxAge: 300, requestedAt: now - 10)
        }
        guard case .staleAuthentication? = error else {
            Issue.record("expected staleAuthentication, got \(String(describing: error))")
            return
        }
    }

    @Test func extremeClaimsNeitherTrapNorPass() async {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        let error = await identityError {
            _ = try await validate(fixture, ["auth_time": -8_000_000_000_000_000], requestedAt: now)
        }
        guard case .staleAuthentication? = error else {
            Issue.record("expected staleAuthentication, got \(String(describing: error))")
            return
        }
    }

    @Test func noRecencyAskedNoAuthTimeNeeded() async throws {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        _ = try await fixture.validate(signer.token(fixture.claims()))
    }
}
