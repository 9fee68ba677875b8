import Testing

@testable import Identity

/// OpenID Connect Core 3.1.2.1: a sign-in that asks for `max_age` gets an ID token with
/// `auth_time`, and the person authenticated within `max_age` of the request. In shared mode the
/// broker asks for `max_age=0`, so that a browser session left by the last person cannot sign
/// the next one in; these are the checks a provider that ignores it runs into.
@Suite struct AuthenticationTimeTests {
    private let signer = TestSigner.ec(kid: "ec-1")

    /// `requestedAt`: when the sign-in began, in whole seconds; the token was asked for at `now`.
    private func validate(_ fixture: Fixture, _ changes: [String: Any?], maxAge: Int64 = 0, requestedAt: Int64)
        async throws(IdentityError) -> IdentityClaims
    {
        try await validate(
            fixture, changes, maxAge: maxAge, startedAt: requestedAt * 1_000_000,
            tokenRequestAt: fixture.clock.now() * 1_000_000)
    }

    /// The broker's two instants in microseconds.
    private func validate(
        _ fixture: Fixture, _ changes: [String: Any?], maxAge: Int64 = 0, startedAt: Int64, tokenRequestAt: Int64
    ) async throws(IdentityError) -> IdentityClaims {
        try await fixture.validator.validate(
            signer.token(fixture.claims(changes)), clientId: Fixture.clientId, expectedNonce: "nonce-xyz",
            recency: AuthenticationRecency(maxAge: maxAge, startedAt: startedAt, tokenRequestAt: tokenRequestAt))
    }

    private func expectStale(_ error: IdentityError?, containing words: [String] = []) {
        guard case .staleAuthentication(let text)? = error else {
            Issue.record("expected staleAuthentication, got \(String(describing: error))")
            return
        }
        for word in words { #expect(text.contains(word), "\(text)") }
    }

    /// The clocks agree; the sign-in began 0.3 s into second T-4, and the provider answered with an
    /// authentication of that same second (a session made a moment before, or a moment after: the
    /// whole-second auth_time cannot tell). Refused: a one-second allowance took it as fresh.
    @Test func anAuthenticationInTheSecondTheSignInBeganIsRefused() async {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        let error = await identityError {
            _ = try await validate(
                fixture, ["iat": now, "auth_time": now - 4], startedAt: (now - 4) * 1_000_000 + 300_000,
                tokenRequestAt: now * 1_000_000 + 50_000)
        }
        expectStale(error, containing: ["earlier browser session", "max_age=0"])
    }

    /// The rule with exact instants: the provider's span from auth_time to the end of iat's second
    /// must fit in the broker's span from the start to the token request. auth_time is the start
    /// rounded up (T-3); iat is T. A token request at T+0.3 s makes the spans equal (4 s): accepted.
    /// A microsecond sooner, the provider's clock could be up to 0.7 s ahead and the authentication
    /// before the start: refused.
    @Test func theBoundaryBothWays() async throws {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let now = fixture.clock.now()
        let claims: [String: Any?] = ["iat": now, "auth_time": now - 3]
        let start = (now - 4) * 1_000_000 + 300_000
        _ = try await validate(fixture, claims, startedAt: start, tokenRequestAt: now * 1_000_000 + 300_000)
        let error = await identityError {
            _ = try await validate(fixture, claims, startedAt: start, tokenRequestAt: now * 1_000_000 + 299_999)
        }
        expectStale(error)
        // The same instants with max_age=1 admit a second more.
        _ = try await validate(
            fixture, ["iat": now, "auth_time": now - 4], maxAge: 1, startedAt: start,
            tokenRequestAt: now * 1_000_000 + 300_000)
    }

    @Test func authTimeZeroSaysSo() async {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let error = await identityError {
            _ = try await validate(fixture, ["auth_time": 0], requestedAt: fixture.clock.now() - 10)
        }
        expectStale(error, containing: ["no usable auth_time (0)", "docs/providers.md"])
        #expect(error.map { !$0.description.contains(" s before") } == true)
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
        expectStale(error, containing: ["earlier browser session", "authenticated 28800 s before it issued"])
        #expect(error?.brokerFailure(during: .signIn(.browser)).code == .accessDenied)
    }

    @Test func aMissingAuthTimeIsRefused() async {
        let fixture = Fixture(serving: jwks([signer.jwk]))
        let error = await identityError {
            _ = try await validate(fixture, [:], requestedAt: fixture.clock.now())
        }
        expectStale(error, containing: ["no usable auth_time (none)"])
        #expect(error?.brokerFailure(during: .signIn(.browser)).code == .accessDenied)
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
