import Foundation
import Testing

/// idp-sim honours `prompt=login` and `max_age` as OpenID Connect Core 3.1.2.1 says a provider
/// must (the broker's shared mode depends on it), and `--ignore-reauthentication` makes it the
/// provider that does not, for the broker's tests of its own check.
@Suite("idp-sim re-authentication: prompt=login and max_age")
struct ReauthenticationTests {
    /// Signs alice in through the form; returns the browser holding her session.
    private func signedInBrowser(_ server: IdpSimServer) async throws -> Browser {
        let browser = Browser()
        let page = try await browser.get(
            AuthorizeTests.authorizeURL(server, challenge: AuthorizeTests.pkce().challenge))
        let (action, flow) = try AuthorizeTests.form(page)
        let done = try await browser.post(
            action, [("username", "alice@contoso.test"), ("password", "Passw0rd!"), ("flow", flow)])
        #expect(done.status == 302)
        return browser
    }

    @Test func maxAgeZeroAndPromptLoginShowTheFormDespiteTheSession() async throws {
        let server = try await IdpSimServer.start()
        let browser = try await signedInBrowser(server)
        let challenge = AuthorizeTests.pkce().challenge
        #expect(try await browser.get(AuthorizeTests.authorizeURL(server, challenge: challenge)).status == 302)
        for extra in [[("max_age", "0")], [("prompt", "login")], [("prompt", "login consent"), ("max_age", "0")]] {
            let page = try await browser.get(AuthorizeTests.authorizeURL(server, challenge: challenge, extra: extra))
            #expect(page.status == 200, "\(extra)")
            #expect(page.text.contains("name=\"password\""), "\(extra)")
        }
        // A session younger than max_age still signs in at once.
        let young = try await browser.get(
            AuthorizeTests.authorizeURL(server, challenge: challenge, extra: [("max_age", "3600")]))
        #expect(young.status == 302)
    }

    @Test func theIDTokenCarriesTheNewAuthenticationTime() async throws {
        let server = try await IdpSimServer.start()
        let browser = try await signedInBrowser(server)
        let (verifier, challenge) = AuthorizeTests.pkce()
        let before = Int(Date().timeIntervalSince1970)
        let page = try await browser.get(
            AuthorizeTests.authorizeURL(server, challenge: challenge, prompt: "login", extra: [("max_age", "0")]))
        let (action, flow) = try AuthorizeTests.form(page)
        let done = try await browser.post(
            action, [("username", "alice@contoso.test"), ("password", "Passw0rd!"), ("flow", flow)])
        let code = try #require(HTTP.query(of: done.header("Location") ?? "")["code"])
        let tokens = try await AuthorizeTests.redeem(server, code: code, verifier: verifier)
        let claims = jwtPayload(try #require(tokens.string("id_token")))
        let authTime = try #require(claims["auth_time"] as? Int)
        #expect(authTime >= before - 1)
    }

    @Test func badMaxAgeAndPromptListsAreRefused() async throws {
        let server = try await IdpSimServer.start()
        let challenge = AuthorizeTests.pkce().challenge
        for extra in [[("max_age", "-1")], [("max_age", "soon")], [("prompt", "none login")], [("prompt", "later")]] {
            let result = try await HTTP.get(AuthorizeTests.authorizeURL(server, challenge: challenge, extra: extra))
            #expect(result.status == 302, "\(extra)")
            #expect(HTTP.query(of: result.header("Location") ?? "")["error"] == "invalid_request", "\(extra)")
        }
    }

    @Test func theMisbehavingSwitchSignsTheOldSessionInAtOnce() async throws {
        let server = try await IdpSimServer.start(arguments: ["--ignore-reauthentication"])
        let browser = try await signedInBrowser(server)
        let (verifier, challenge) = AuthorizeTests.pkce()
        let silent = try await browser.get(
            AuthorizeTests.authorizeURL(server, challenge: challenge, prompt: "login", extra: [("max_age", "0")]))
        #expect(silent.status == 302)
        let code = try #require(HTTP.query(of: silent.header("Location") ?? "")["code"])
        let tokens = try await AuthorizeTests.redeem(server, code: code, verifier: verifier)
        #expect(jwtPayload(try #require(tokens.string("id_token")))["auth_time"] != nil)
    }
}
