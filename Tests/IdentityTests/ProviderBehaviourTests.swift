import BrokerCore
import HTTP
import Locking
import Logging
import Testing

@testable import Identity

/// Providers as they really behave (docs/providers.md), against the scripted provider of
/// ``ProviderFaultPolicyTests``: a login page where native authentication would be, a refused
/// revocation, an authorization endpoint nobody answers.
extension ProviderFaultPolicyTests {
    func discovery(_ extra: [String: Any]) -> String {
        json(
            [
                "issuer": Self.authority, "token_endpoint": Self.authority + "/oauth2/v2.0/token",
                "jwks_uri": Self.authority + "/keys", "revocation_endpoint": Self.authority + "/oauth2/v2.0/revoke",
                "authorization_endpoint": Self.authority + "/oauth2/v2.0/authorize",
            ].merging(extra) { $1 })
    }

    static let loginPage = ScriptedTransport.Step.answer(
        200, headers: [HTTPHeader("Content-Type", "text/html; charset=utf-8")],
        body: "<!DOCTYPE html><html><body><form>Sign in</form></body></html>")

    @Test(arguments: [
        loginPage, .answer(302, headers: [HTTPHeader("Location", "https://login.example.test/login")]),
        .answer(200, body: "Welcome"),
    ])
    func anAnswerThatIsNotNativeAuthenticationFallsBackToThePasswordGrant(initiate: ScriptedTransport.Step)
        async throws
    {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery([:]))], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                "/oauth2/v2.0/initiate": [initiate], "/oauth2/v2.0/token": [.answer(200, body: tokens)],
            ], time: time)
        let provider = try provider(fake)
        let signedIn = try await provider.signInWithPassword(
            clientId: "mail-app", username: "ada@example.test", password: "pw", scopes: Scopes(["User.Read"]))
        #expect(signedIn.refreshToken == "rt-2")
        #expect(fake.count("/oauth2/v2.0/initiate") == 1)
        #expect(try await provider.signInFlows() == [.password, .browser])
        let code = await failure { _ = try await provider.startCodeSignIn(clientId: "mail-app", username: "ada") }
        #expect(code?.code == .notSupported, "\(String(describing: code))")
        #expect(fake.count("/oauth2/v2.0/initiate") == 1, "what was learnt is not asked again")
    }

    @Test func theSignInOptionsProbeTellsALoginPageFromNativeAuthentication() async throws {
        for (initiate, native) in [
            (Self.loginPage, false), (.answer(404), false),
            (.answer(400, body: json(["error": "invalid_request", "error_description": "client_id"])), true),
        ] {
            let fake = FakeProvider(
                ["/.well-known": [.answer(200, body: discovery([:]))], "/oauth2/v2.0/initiate": [initiate]],
                time: time)
            let provider = try provider(fake)
            let expected: [SignInFlow] = native ? [.password, .emailCode, .browser] : [.password, .browser]
            #expect(try await provider.signInFlows() == expected, "\(initiate)")
            #expect(try await provider.signInFlows() == expected)
            #expect(fake.count("/oauth2/v2.0/initiate") == 1, "probed once: \(initiate)")
        }
    }

    @Test func discoveryThatListsItsGrantsDecidesWithoutAProbe() async throws {
        for (grants, native) in [(["authorization_code", "password"], false), (["password", "oob"], true)] {
            let fake = FakeProvider(
                [
                    "/.well-known": [.answer(200, body: discovery(["grant_types_supported": grants]))],
                    "/oauth2/v2.0/initiate": [.answer(400, body: json(["error": "invalid_request"]))],
                ], time: time)
            let provider = try provider(fake)
            #expect(try await provider.signInFlows().contains(.emailCode) == native, "\(grants)")
            #expect(fake.count("/oauth2/v2.0/initiate") == (native ? 1 : 0), "\(grants)")
        }
    }

    @Test func aJSONAnswerThatIsBrokenStaysAServerError() async throws {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery([:]))],
                "/oauth2/v2.0/initiate": [
                    .answer(200, headers: [HTTPHeader("Content-Type", "application/json")], body: "{\"continuation")
                ],
            ], time: time)
        let error = await failure {
            _ = try await provider(fake).signInWithPassword(
                clientId: "mail-app", username: "ada", password: "pw", scopes: Scopes(["User.Read"]))
        }
        #expect(error?.code == .serverError, "\(String(describing: error))")
    }

    @Test func aRevocationRefusedWithA4xxIsARefusalNotAnOutage() async throws {
        for (answer, said) in [
            (ScriptedTransport.Step.answer(401), "(HTTP 401)"), (.answer(403), "(HTTP 403)"),
            (
                .answer(400, body: json(["error": "unsupported_token_type", "error_description": "no"])),
                "(HTTP 400: unsupported_token_type: no)"
            ),
        ] {
            let fake = FakeProvider(
                ["/.well-known": [.answer(200, body: discovery([:]))], "/oauth2/v2.0/revoke": [answer]], time: time)
            let error = await failure {
                _ = try await provider(fake).revoke(clientId: "mail-app", token: .refreshToken("rt-1"))
            }
            #expect(error?.code == .accessDenied, "\(String(describing: error))")
            #expect(
                error?.message.contains("refuses to revoke tokens of this public client \(said)") == true,
                "\(String(describing: error))")
            #expect(fake.count("/oauth2/v2.0/revoke") == 1, "a refusal is not asked again")
        }
        for outage in [ScriptedTransport.Step.answer(503), .answer(429), .answer(408)] {
            let fake = FakeProvider(
                ["/.well-known": [.answer(200, body: discovery([:]))], "/oauth2/v2.0/revoke": [outage]], time: time)
            let error = await failure {
                _ = try await provider(fake).revoke(clientId: "mail-app", token: .refreshToken("rt-1"))
            }
            #expect(
                error.map { [.serverUnavailable, .serverError].contains($0.code) } == true,
                "\(outage): \(String(describing: error))")
        }
    }

    @Test func aBrowserSignInAtAProviderThatDoesNotAnswerOpensNothing() async throws {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery([:]))],
                "/oauth2/v2.0/authorize": [.fail(.couldNotConnect("refused"))],
            ], time: time)
        let opened = Locked<[String]>([])
        let requester = ProviderHTTP(
            transport: fake.transport, policy: .standard, clock: time, sleep: time.sleeper, random: { 1 })
        let provider = OIDCProvider(
            authority: try Authority(Self.authority), requester: requester, clock: clock,
            logger: Logger(label: "test"), urlOpener: RecordingOpener(opened: opened))
        let error = await failure {
            _ = try await provider.signInInteractively(
                clientId: "mail-app", scopes: Scopes(["User.Read"]), request: InteractiveRequest(timeout: .seconds(300))
            )
        }
        #expect(error?.code == .serverUnavailable, "\(String(describing: error))")
        #expect(error?.message.contains("could not be reached for the sign-in page") == true)
        #expect(opened.withLock { $0 }.isEmpty)
        #expect(fake.count("/oauth2/v2.0/authorize") == 3, "the usual retries of a connection never made")
    }
}

private struct RecordingOpener: URLOpener {
    let opened: Locked<[String]>
    func open(_ url: String) async throws(IdentityError) { opened.withLock { $0.append(url) } }
}
