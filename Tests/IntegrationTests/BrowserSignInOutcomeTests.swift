import Foundation
import HTTP
import TestSupport
import Testing

/// What brokerd makes of a browser sign-in's answer at a shared device, against providers that
/// misbehave as real ones do: one that takes a session made a moment ago for a fresh
/// authentication, one that refuses `max_age`, one whose ID tokens carry no usable `auth_time`.
/// A refused answer ends that browser session (RP-initiated logout with the refused ID token as
/// its hint), so the next person does not inherit it. Real brokerd, brokerctl and idp-sim; the
/// browser is the scripted one.
@Suite("The outcome of a browser sign-in at a shared device", .serialized)
struct BrowserSignInOutcomeTests {
    private let alice = TestUsers.alice
    private let bob = TestUsers.bob

    /// brokerd in shared mode with `browserSignOut` when-asked: an app's sign-out leaves the
    /// browser session, so whatever ends it below is the refusal's doing.
    private func environment(idpArguments: [String]) throws -> BrokerEnvironment {
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.conf", "{\"browserSignOut\": \"when-asked\"}")
        chmod(config, 0o600)
        return try BrokerEnvironment(brokerArguments: ["--config", config], idpArguments: idpArguments)
    }

    private static func query(_ url: String) -> [String: String] {
        (URLComponents(string: url)?.queryItems ?? []).reduce(into: [:]) { $0[$1.name] = $1.value }
    }

    /// The claims of a compact JWS, unverified (the test reads what brokerd sent on).
    private static func claims(_ token: String) throws -> [String: Any] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw ProcessFailure("not a compact JWS") }
        var text = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text),
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { throw ProcessFailure("its payload is not a JSON object") }
        return object
    }

    private func currentUsername(_ env: BrokerEnvironment) throws -> String? {
        let current = try env.brokerctl(["current-account", "--client-id", "notes-app", "--json"]).json()["current"]
        return (current as? [String: Any])?["username"] as? String
    }

    /// The next page brokerd opens is the provider's end-session page, with an ID token for
    /// `username` from the authorization request `authorization` (its nonce) as the hint.
    private func expectEndSession(
        _ env: BrokerEnvironment, of username: String, from authorization: String
    ) async throws {
        let logout = try await env.browser.nextProviderURL()
        #expect(logout.hasPrefix(env.idp.authority + "/oauth2/v2.0/logout?"), "\(logout)")
        let hint = try #require(Self.query(logout)["id_token_hint"], "\(logout)")
        let claims = try Self.claims(hint)
        #expect(claims["preferred_username"] as? String == username, "\(claims)")
        #expect(claims["nonce"] as? String == Self.query(authorization)["nonce"], "the refused sign-in's token")
        try await env.browser.visit(logout)
        #expect(!env.browser.hasCookies(for: env.idp.baseURL), "the browser session ended")
    }

    @Test("a session made a moment before the sign-in began is not a fresh authentication: bob is refused")
    func aSessionOfTheSameSecondIsRefused() async throws {
        // The provider takes a session younger than 30 s as fresh, whatever prompt and max_age say.
        let env = try environment(idpArguments: ["--ignore-reauthentication-within", "30"])
        let first = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        try await env.browser.signIn(
            at: try await env.browser.nextProviderURL(), username: alice.username, password: alice.password)
        #expect(try first.waitForExit(timeout: .seconds(20)) == 0, "\(first.allOutput)")
        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)

        // Bob walks up at once: alice's session is under two seconds old, and the provider hands
        // the browser her code without asking anyone anything.
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        let authorization = try await env.browser.nextProviderURL()
        #expect(try await env.browser.visit(authorization).outcome != .signInForm)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 1, "\(ctl.allOutput)")
        let error = ctl.stderrText
        #expect(error.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(ctl.allOutput)")
        #expect(error.contains("earlier browser session"), "\(error)")
        #expect(error.contains("session in the browser was ended"), "\(error)")
        #expect(try currentUsername(env) == nil, "nobody signed in, never alice for bob")
        try await expectEndSession(env, of: alice.username, from: authorization)
    }

    @Test("a provider that refuses max_age: asked again with prompt=login alone, once, and the sign-in succeeds")
    func aProviderThatRefusesMaxAge() async throws {
        let env = try environment(idpArguments: ["--refuse-max-age"])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let refused = try await env.browser.nextProviderURL()
        #expect(Self.query(refused)["max_age"] == "0" && Self.query(refused)["prompt"] == "login", "\(refused)")
        // The provider sends the browser back to brokerd with invalid_request.
        let back = try await env.browser.visit(refused)
        #expect(back.lastURL.contains("error=invalid_request"), "\(back.lastURL)")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) { $0.contains("refuses max_age") }

        let again = try await env.browser.nextProviderURL()
        #expect(Self.query(again)["max_age"] == nil && Self.query(again)["prompt"] == "login", "\(again)")
        #expect(
            try await env.browser.signIn(at: again, username: alice.username, password: alice.password) != .signInForm)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
        #expect(try currentUsername(env) == alice.username)
        #expect(env.browser.openedCount == 2, "one retry, no end-session page")

        // The next person's sign-in asks without max_age from the start: one page, not two.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        let next = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        let page = try await env.browser.nextProviderURL()
        #expect(Self.query(page)["max_age"] == nil && Self.query(page)["prompt"] == "login", "\(page)")
        #expect(try await env.browser.signIn(at: page, username: bob.username, password: bob.password) != .signInForm)
        #expect(try next.waitForExit(timeout: .seconds(20)) == 0, "\(next.allOutput)")
        #expect(try currentUsername(env) == bob.username)
        #expect(env.browser.openedCount == 3, "the second sign-in opened one page")
    }

    @Test("a provider that refuses max_age and ignores prompt=login: auth_time is still checked")
    func aProviderThatRefusesMaxAgeStillHasItsAuthTimeChecked() async throws {
        let env = try environment(idpArguments: ["--refuse-max-age", "--ignore-reauthentication"])
        // Alice's own sign-in: refused max_age, asked again, she types her password.
        let first = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        try await env.browser.visit(try await env.browser.nextProviderURL())
        try await env.browser.signIn(
            at: try await env.browser.nextProviderURL(), username: alice.username, password: alice.password)
        #expect(try first.waitForExit(timeout: .seconds(20)) == 0, "\(first.allOutput)")
        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)
        let aged = try await HTTPClient.shared.send(
            HTTPRequest(method: "POST", url: env.idp.baseURL + "/test/age-sessions?seconds=28800"))
        #expect(aged.status == 200, "\(aged.bodyText)")

        // The refusal is remembered: bob's sign-in asks with prompt=login alone from the start.
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        let authorization = try await env.browser.nextProviderURL()
        #expect(Self.query(authorization)["max_age"] == nil, "\(authorization)")
        #expect(try await env.browser.visit(authorization).outcome != .signInForm)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 1, "\(ctl.allOutput)")
        let error = ctl.stderrText
        #expect(error.contains("AccessDenied") && error.contains("earlier browser session"), "\(error)")
        #expect(!error.contains("max_age=0") && error.contains("prompt=login"), "max_age was not sent: \(error)")
        #expect(try currentUsername(env) == nil)
        try await expectEndSession(env, of: alice.username, from: authorization)
    }

    @Test("auth_time 0 in the provider's ID token: refused, saying so, and the browser session ended")
    func authTimeZero() async throws {
        let env = try environment(idpArguments: ["--auth-time", "zero"])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let authorization = try await env.browser.nextProviderURL()
        try await env.browser.signIn(at: authorization, username: alice.username, password: alice.password)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 1, "\(ctl.allOutput)")
        let error = ctl.stderrText
        #expect(error.contains("AccessDenied") && error.contains("no usable auth_time (0)"), "\(error)")
        #expect(!error.contains(" s before"), "no made-up age: \(error)")
        #expect(try currentUsername(env) == nil)
        try await expectEndSession(env, of: alice.username, from: authorization)
    }

    @Test("no auth_time in the provider's ID token: refused, saying so")
    func authTimeAbsent() async throws {
        let env = try environment(idpArguments: ["--auth-time", "absent"])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let authorization = try await env.browser.nextProviderURL()
        try await env.browser.signIn(at: authorization, username: alice.username, password: alice.password)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 1, "\(ctl.allOutput)")
        let error = ctl.stderrText
        #expect(error.contains("AccessDenied") && error.contains("no usable auth_time (none)"), "\(error)")
        #expect(try currentUsername(env) == nil)
        try await expectEndSession(env, of: alice.username, from: authorization)
    }
}
