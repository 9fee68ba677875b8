import Crypto
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A minimal "browser": keeps the session cookie and follows nothing automatically.
final class Browser: @unchecked Sendable {
    var cookie: String?

    func get(_ url: String) async throws -> HTTPResult {
        let result = try await HTTP.get(url, headers: cookie.map { ["Cookie": $0] } ?? [:])
        remember(result)
        return result
    }

    func post(_ url: String, _ form: [(String, String)]) async throws -> HTTPResult {
        let result = try await HTTP.postForm(url, form, headers: cookie.map { ["Cookie": $0] } ?? [:])
        remember(result)
        return result
    }

    private func remember(_ result: HTTPResult) {
        guard let setCookie = result.header("Set-Cookie"), let pair = setCookie.split(separator: ";").first else {
            return
        }
        cookie = setCookie.contains("Max-Age=0") ? nil : String(pair)
    }
}

@Suite("idp-sim authorization code flow")
struct AuthorizeTests {
    static let redirect = "http://127.0.0.1:49152/callback"

    static func pkce() -> (verifier: String, challenge: String) {
        let verifier = (0..<4).map { _ in UUID().uuidString }.joined().replacingOccurrences(of: "-", with: "")
        let challenge = Data(SHA256.hash(data: Data(verifier.utf8))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
                of: "=", with: "")
        return (verifier, challenge)
    }

    static func authorizeURL(
        _ server: IdpSimServer, challenge: String, prompt: String? = nil, redirect: String = redirect,
        extra: [(String, String)] = []
    ) -> String {
        var parameters =
            [
                ("response_type", "code"), ("client_id", "broker-app"), ("redirect_uri", redirect),
                ("scope", "openid profile offline_access User.Read"), ("state", "st-1"), ("nonce", "nonce-1"),
                ("code_challenge", challenge), ("code_challenge_method", "S256"),
            ] + extra
        if let prompt { parameters.append(("prompt", prompt)) }
        return server.authority + "/oauth2/v2.0/authorize?" + HTTP.formEncode(parameters)
    }

    /// The hidden flow id and form action from the sign-in page.
    static func form(_ page: HTTPResult) throws -> (action: String, flow: String) {
        let html = page.text
        func attribute(after marker: String) -> String? {
            guard let start = html.range(of: marker) else { return nil }
            let rest = html[start.upperBound...]
            guard let end = rest.firstIndex(of: "\"") else { return nil }
            return String(rest[..<end])
        }
        return (try #require(attribute(after: "action=\"")), try #require(attribute(after: "name=\"flow\" value=\"")))
    }

    static func redeem(_ server: IdpSimServer, code: String, verifier: String, redirect: String = redirect) async throws
        -> HTTPResult
    {
        try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "authorization_code"), ("client_id", "broker-app"), ("code", code),
                ("redirect_uri", redirect), ("code_verifier", verifier),
            ])
    }

    @Test func formSignInSilentReauthPkceAndLogout() async throws {
        let server = try await IdpSimServer.start()
        let browser = Browser()
        let (verifier, challenge) = Self.pkce()

        let page = try await browser.get(Self.authorizeURL(server, challenge: challenge))
        #expect(page.status == 200)
        #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
        let (action, flow) = try Self.form(page)

        let bad = try await browser.post(
            action, [("username", "alice@contoso.test"), ("password", "wrong"), ("flow", flow)])
        #expect(bad.status == 200)
        #expect(bad.text.contains("incorrect"))

        let signedIn = try await browser.post(
            action, [("username", "alice@contoso.test"), ("password", "Passw0rd!"), ("flow", flow)])
        #expect(signedIn.status == 302)
        let location = try #require(signedIn.header("Location"))
        #expect(location.hasPrefix(Self.redirect))
        let query = HTTP.query(of: location)
        #expect(query["state"] == "st-1")
        let code = try #require(query["code"])
        #expect(browser.cookie != nil)

        // Wrong verifier fails, and the code is single use either way.
        let wrongVerifier = try await Self.redeem(server, code: code, verifier: Self.pkce().verifier)
        #expect(wrongVerifier.string("error") == "invalid_grant")
        #expect(try await Self.redeem(server, code: code, verifier: verifier).string("error") == "invalid_grant")

        // A second authorize is silent thanks to the session cookie; this time redeem correctly.
        let (verifier2, challenge2) = Self.pkce()
        let silent = try await browser.get(Self.authorizeURL(server, challenge: challenge2))
        #expect(silent.status == 302)
        let code2 = try #require(HTTP.query(of: silent.header("Location") ?? "")["code"])
        let wrongRedirect = try await Self.redeem(
            server, code: code2, verifier: verifier2, redirect: "http://127.0.0.1:49153/callback")
        #expect(wrongRedirect.string("error") == "invalid_grant")

        let (verifier3, challenge3) = Self.pkce()
        let silentAgain = try await browser.get(Self.authorizeURL(server, challenge: challenge3, prompt: "none"))
        let code3 = try #require(HTTP.query(of: silentAgain.header("Location") ?? "")["code"])
        let tokens = try await Self.redeem(server, code: code3, verifier: verifier3)
        #expect(tokens.status == 200, "\(tokens.text)")
        let id = jwtPayload(try #require(tokens.string("id_token")))
        #expect(id["nonce"] as? String == "nonce-1")
        #expect(id["aud"] as? String == "broker-app")
        #expect(tokens.string("refresh_token") != nil)

        // prompt=login forces the form even with a session.
        let forced = try await browser.get(Self.authorizeURL(server, challenge: challenge3, prompt: "login"))
        #expect(forced.status == 200)

        // Logout ends the session; prompt=none then reports login_required.
        let logout = try await browser.get(
            server.authority + "/oauth2/v2.0/logout?"
                + HTTP.formEncode([
                    ("id_token_hint", tokens.string("id_token") ?? ""),
                    ("post_logout_redirect_uri", "http://localhost:49152/signed-out"), ("state", "bye"),
                ]))
        #expect(logout.status == 302)
        #expect(logout.header("Location") == "http://localhost:49152/signed-out?state=bye")
        #expect(browser.cookie == nil)
        let afterLogout = try await browser.get(Self.authorizeURL(server, challenge: challenge3, prompt: "none"))
        #expect(afterLogout.status == 302)
        let errorQuery = HTTP.query(of: afterLogout.header("Location") ?? "")
        #expect(errorQuery["error"] == "login_required")
        #expect(errorQuery["state"] == "st-1")
        #expect(errorQuery["code"] == nil)
    }

    @Test func authorizeRequestValidation() async throws {
        let server = try await IdpSimServer.start()
        let (_, challenge) = Self.pkce()
        // Bad redirect URIs are never redirected to (RFC 6749 §4.1.2.1).
        for redirect in ["https://evil.example/cb", "http://127.0.0.1:8080/other", "http://192.168.1.2:80/callback"] {
            let result = try await HTTP.get(Self.authorizeURL(server, challenge: challenge, redirect: redirect))
            #expect(result.status == 400, "\(redirect)")
            #expect(result.header("Location") == nil)
        }
        // localhost with any port is fine (RFC 8252 §7.3).
        #expect(
            try await HTTP.get(
                Self.authorizeURL(server, challenge: challenge, redirect: "http://localhost:1234/callback")
            ).status == 200)

        // Missing PKCE is reported to the client by redirect.
        let noPKCE =
            server.authority + "/oauth2/v2.0/authorize?"
            + HTTP.formEncode([
                ("response_type", "code"), ("client_id", "broker-app"), ("redirect_uri", Self.redirect), ("state", "s"),
            ])
        let result = try await HTTP.get(noPKCE)
        #expect(result.status == 302)
        #expect(HTTP.query(of: result.header("Location") ?? "")["error"] == "invalid_request")

        let plainURL =
            server.authority + "/oauth2/v2.0/authorize?"
            + HTTP.formEncode([
                ("response_type", "code"), ("client_id", "broker-app"), ("redirect_uri", Self.redirect), ("state", "s"),
                ("code_challenge", challenge), ("code_challenge_method", "plain"),
            ])
        let plain = try await HTTP.get(plainURL)
        #expect(plain.status == 302)
        #expect(HTTP.query(of: plain.header("Location") ?? "")["error"] == "invalid_request")

        let unknownClient = try await HTTP.get(
            server.authority + "/oauth2/v2.0/authorize?client_id=nope&redirect_uri=" + Self.redirect)
        #expect(unknownClient.status == 400)
    }
}
