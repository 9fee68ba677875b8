import BrokerCore
import Foundation
import HTTP
import Locking
import Logging
import Testing

@testable import Identity

/// OIDCProvider against a scripted provider (no network, fake time): which requests are sent
/// again, which are not, and what the broker error says.
@Suite struct ProviderFaultPolicyTests {
    static let authority = Fixture.issuer  // https://login.example.test/tenant-1/v2.0
    static let host = "login.example.test"
    let time = FakeTime()
    let signer = TestSigner.ec(kid: "k1")
    let clock = TestClock()

    /// A provider whose endpoints answer from `routes`: path suffix → scripted steps.
    final class FakeProvider: @unchecked Sendable {
        private let state: Locked<[String: [ScriptedTransport.Step]]>
        private let counts = Locked<[String: Int]>([:])
        let time: FakeTime

        init(_ routes: [String: [ScriptedTransport.Step]], time: FakeTime) {
            state = Locked(routes)
            self.time = time
        }

        func count(_ suffix: String) -> Int { counts.withLock { $0[suffix] ?? 0 } }

        var transport: ProviderHTTP.Transport {
            { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in
                let path = request.url.dropFirst(ProviderFaultPolicyTests.authority.count)
                let (key, step) = self.state.withLock { routes -> (String, ScriptedTransport.Step?) in
                    guard let key = routes.keys.first(where: { path.hasPrefix($0) }), var steps = routes[key] else {
                        return ("", nil)
                    }
                    let step = steps.count > 1 ? steps.removeFirst() : steps[0]
                    routes[key] = steps
                    return (key, step)
                }
                self.counts.withLock { $0[key, default: 0] += 1 }
                switch step {
                case .answer(let status, let headers, let body)?:
                    return HTTPResponse(status: status, headers: headers, body: Array(body.utf8))
                case .fail(let error)?:
                    throw error
                case .take(let duration, let error)?:
                    self.time.advance(min(duration, request.timeout))
                    throw duration >= request.timeout ? .timedOut(request.timeout) : error
                case nil:
                    return HTTPResponse(status: 404)
                }
            }
        }
    }

    var discovery: String {
        json([
            "issuer": Self.authority, "token_endpoint": Self.authority + "/oauth2/v2.0/token",
            "jwks_uri": Self.authority + "/keys",
        ])
    }

    var tokens: String {
        let now = clock.now()
        let idToken = signer.token([
            "iss": Self.authority, "aud": "mail-app", "sub": "s-1", "oid": "o-1", "tid": "t-1",
            "iat": now, "exp": now + 3600, "preferred_username": "ada@example.test",
        ])
        return json([
            "access_token": "at-2", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt-2",
            "id_token": idToken,
        ])
    }

    func provider(_ fake: FakeProvider) throws -> OIDCProvider {
        let requester = ProviderHTTP(
            transport: fake.transport, policy: .standard, clock: time, sleep: time.sleeper, random: { 1 })
        return OIDCProvider(
            authority: try Authority(Self.authority), requester: requester, clock: clock,
            logger: Logger(label: "test"), allowPasswordGrant: true)
    }

    func failure(_ body: () async throws -> Void) async -> BrokerFailure? {
        do {
            try await body()
            return nil
        } catch let failure as BrokerFailure {
            return failure
        } catch {
            Issue.record("not a BrokerFailure: \(error)")
            return nil
        }
    }

    func refresh(_ provider: OIDCProvider) async throws -> ProviderTokens {
        try await provider.refresh(clientId: "mail-app", refreshToken: "rt-1", scopes: Scopes(["User.Read"]))
    }

    @Test func aRefreshAnswered503TwiceSucceedsOnTheThirdTry() async throws {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                "/oauth2/v2.0/token": [.answer(503), .answer(503), .answer(200, body: tokens)],
            ], time: time)
        let result = try await refresh(try provider(fake))
        #expect(result.refreshToken == "rt-2")
        #expect(fake.count("/oauth2/v2.0/token") == 3)
        #expect(time.sleeps == [.milliseconds(500), .seconds(1)])
    }

    @Test func aRefreshWhoseAnswerWasLostIsNotSentAgain() async throws {
        for step in [
            ScriptedTransport.Step.answer(504), .answer(502), .answer(500),
            .fail(.transport(code: 56, message: "Connection reset by peer")),
        ] {
            let fake = FakeProvider(
                [
                    "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                    "/oauth2/v2.0/token": [step],
                ], time: time)
            let provider = try provider(fake)
            let error = await failure { _ = try await refresh(provider) }
            #expect(fake.count("/oauth2/v2.0/token") == 1, "\(step)")
            #expect(
                error?.message.contains("it was not sent again, as the provider may have used it") == true,
                "\(String(describing: error))")
            #expect(error?.code != .interactionRequired, "the refresh token is not declared dead: it may still be good")
        }
    }

    @Test func signingKeysThatCannotBeFetchedStopTheGrantBeforeItSpendsTheRefreshToken() async throws {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(503)],
                "/oauth2/v2.0/token": [.answer(200, body: tokens)],
            ], time: time)
        let error = await failure { _ = try await refresh(try provider(fake)) }
        #expect(error?.code == .serverUnavailable)
        #expect(
            error?.message.contains(
                "the identity provider at \(Self.host) answered the signing keys (JWKS) with HTTP 503 (3 tries)")
                == true,
            "\(String(describing: error))")
        #expect(fake.count("/keys") == 3)
        #expect(fake.count("/oauth2/v2.0/token") == 0)
    }

    @Test func discoveryIsRetriedAndAFailureIsNotKept() async throws {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(500), .answer(500), .answer(500), .answer(200, body: discovery)],
                "/keys": [.answer(200, body: jwks([signer.jwk]))],
                "/oauth2/v2.0/token": [.answer(200, body: tokens)],
            ], time: time)
        let provider = try provider(fake)
        let error = await failure { _ = try await refresh(provider) }
        #expect(error?.code == .serverError)
        #expect(
            error?.message.contains("answered the discovery document with HTTP 500 (3 tries)") == true,
            "\(String(describing: error))")
        #expect(fake.count("/oauth2/v2.0/token") == 0)
        // The next call discovers again and goes through.
        #expect(try await refresh(provider).accessToken == "at-2")
        #expect(fake.count("/.well-known") == 4)
    }

    @Test func garbageTruncatedAndHugeAnswersAreServerErrorsWithoutRetry() async throws {
        let cases: [(ScriptedTransport.Step, String)] = [
            (.answer(200, body: "<html>this is not JSON"), "the token response is not JSON"),
            (.answer(200, body: #"{"access_token":"eyJ0eXAi"#), "the token response is not JSON"),
            (.fail(.responseTooLarge(limit: 1 << 20)), "the answer to the token refresh is larger than 1 MiB"),
        ]
        for (step, expected) in cases {
            let fake = FakeProvider(
                [
                    "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                    "/oauth2/v2.0/token": [step],
                ], time: time)
            let error = await failure { _ = try await refresh(try provider(fake)) }
            #expect(error?.code == .serverError)
            #expect(error?.message.contains(expected) == true, "\(String(describing: error))")
            #expect(error?.message.contains(Self.host) == true, "\(String(describing: error))")
            #expect(fake.count("/oauth2/v2.0/token") == 1)
        }
    }

    @Test func anAbsurdExpiresInIsCappedAtAYearInsteadOfOverflowing() async throws {
        for expiresIn in [#""9223372036854775807""#, "9223372036854775807", "1e300", #""-5""#, "-5"] {
            let body = tokens.replacingOccurrences(of: #""expires_in":3600"#, with: #""expires_in":"# + expiresIn)
            #expect(body != tokens)
            let fake = FakeProvider(
                [
                    "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                    "/oauth2/v2.0/token": [.answer(200, body: body)],
                ], time: time)
            let result = try await refresh(try provider(fake))
            let life = result.expiresOn - clock.now()
            #expect(life >= 0 && life <= OIDCProvider.maximumTokenLifetime, "\(expiresIn): \(life)")
        }
    }

    @Test func aSlowProviderEndsTheCallWithinTheBudget() async throws {
        // Discovery takes 14 s (answered), the keys 14 s (answered): the token request gets the 2 s left.
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                "/oauth2/v2.0/token": [.take(.seconds(60), then: .timedOut(.zero))],
            ], time: time)
        let requester = ProviderHTTP(
            transport: { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in
                if !request.url.hasSuffix("/token") { time.advance(.seconds(14)) }
                return try await fake.transport(request)
            }, policy: .standard, clock: time, sleep: time.sleeper, random: { 1 })
        let provider = OIDCProvider(
            authority: try Authority(Self.authority), requester: requester, clock: clock, logger: Logger(label: "test"))
        let error = await failure { _ = try await refresh(provider) }
        #expect(time.now() == .seconds(30))
        #expect(error?.code == .serverUnavailable)
        #expect(
            error?.message == "the identity provider at \(Self.host) did not answer the token refresh within 2 s, "
                + "the rest of the broker's 30 s limit for one call; try again later")
    }
}
