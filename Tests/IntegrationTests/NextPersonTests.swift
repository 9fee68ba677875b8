import Foundation
import HTTP
import TestSupport
import Testing

/// Two people on one kiosk, one after the other, with the browser left open between them: the
/// provider's browser session that the first one leaves behind must never sign in the next. In
/// shared mode every interactive sign-in asks the provider to authenticate the person now
/// (`prompt=login`, `max_age=0`) and checks the ID token's `auth_time`; `browserSignOut` says
/// when a sign-out ends the browser session. Real brokerd, brokerctl and idp-sim; the browser is
/// the scripted one (these tests are about the broker; Tests/Browser drives a real Chromium).
@Suite("The next person at a shared device", .serialized)
struct NextPersonTests {
    private let alice = TestUsers.alice
    private let bob = TestUsers.bob

    /// brokerd with `browserSignOut` set in its configuration file.
    private func environment(browserSignOut: String?, idpArguments: [String] = []) throws -> BrokerEnvironment {
        guard let browserSignOut else { return try BrokerEnvironment(idpArguments: idpArguments) }
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.conf", "{\"browserSignOut\": \"\(browserSignOut)\"}")
        chmod(config, 0o600)
        return try BrokerEnvironment(brokerArguments: ["--config", config], idpArguments: idpArguments)
    }

    /// Alice signs in to Mail in the browser, typing her password.
    private func aliceSignsIn(_ env: BrokerEnvironment) async throws -> [String: String] {
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let url = try await env.browser.nextProviderURL()
        try await env.browser.signIn(at: url, username: alice.username, password: alice.password)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
        return Self.query(url)
    }

    private static func query(_ url: String) -> [String: String] {
        (URLComponents(string: url)?.queryItems ?? []).reduce(into: [:]) { $0[$1.name] = $1.value }
    }

    private func currentUsername(_ env: BrokerEnvironment) throws -> String? {
        let current = try env.brokerctl(["current-account", "--client-id", "notes-app", "--json"]).json()["current"]
        return (current as? [String: Any])?["username"] as? String
    }

    @Test("alice's browser session does not sign bob in: the provider asks bob for his credentials")
    func aSessionLeftBehindAsksAgain() async throws {
        let env = try environment(browserSignOut: "when-asked")
        let first = try await aliceSignsIn(env)
        #expect(first["prompt"] == "login" && first["max_age"] == "0", "\(first)")

        // Calendar signs the device out without the browser sign-out, as most apps do.
        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)
        #expect(env.browser.openedCount == 1, "when-asked: no end-session page")
        #expect(env.browser.hasCookies(for: env.idp.baseURL), "alice's browser session is still there")

        // Bob walks up and presses "Sign in with browser" in Notes.
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        let url = try await env.browser.nextProviderURL()
        #expect(try await env.browser.visit(url).outcome == .signInForm, "the provider must ask bob, not sign alice in")
        try await env.browser.signIn(at: url, username: bob.username, password: bob.password)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
        #expect(try currentUsername(env) == bob.username)
    }

    @Test("a provider that ignores prompt=login and max_age: the old session is refused, nobody is signed in")
    func aProviderThatIgnoresReauthentication() async throws {
        let env = try environment(browserSignOut: "when-asked", idpArguments: ["--ignore-reauthentication"])
        _ = try await aliceSignsIn(env)
        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)
        // Alice typed her password at the start of her shift.
        let aged = try await HTTPClient.shared.send(
            HTTPRequest(method: "POST", url: env.idp.baseURL + "/test/age-sessions?seconds=28800"))
        #expect(aged.status == 200, "\(aged.bodyText)")

        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        // The provider redirects at once with alice's old session: nobody types anything.
        let seen = try await env.browser.visit(try await env.browser.nextURL())
        #expect(seen.outcome != .signInForm)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 1)
        let error = ctl.stderrText
        #expect(error.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(ctl.allOutput)")
        #expect(error.contains("earlier browser session") && error.contains("max_age=0"), "\(error)")
        #expect(try currentUsername(env) == nil)
    }

    @Test("browserSignOut always (shared mode's default): any app's sign-out ends the browser session")
    func everySignOutEndsTheBrowserSession() async throws {
        let env = try environment(browserSignOut: nil)
        _ = try await aliceSignsIn(env)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(try signOut.json()["browserLogoutOpened"] as? Bool == true, "\(signOut.stdout)")
        #expect(try signOut.json()["browserSessionEnded"] as? Bool == false, "\(signOut.stdout)")
        let logout = try await env.browser.nextProviderURL()
        #expect(logout.hasPrefix(env.idp.authority + "/oauth2/v2.0/logout?"), "\(logout)")
        try await env.browser.visit(logout)
        #expect(!env.browser.hasCookies(for: env.idp.baseURL))
    }

    @Test("browserSignOut never: even an app that asks keeps the session, and is told so")
    func neverEndsTheBrowserSession() async throws {
        let env = try environment(browserSignOut: "never")
        _ = try await aliceSignsIn(env)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--from-browser"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(signOut.stderr.contains("browserSignOut is never"), "\(signOut.stderr)")
        #expect(env.browser.openedCount == 1)
        // The next person is still asked for credentials.
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        let url = try await env.browser.nextProviderURL()
        #expect(try await env.browser.visit(url).outcome == .signInForm)
        try await env.browser.signIn(at: url, username: bob.username, password: bob.password)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
    }

    @Test("no browser for the end-session page: the sign-out stands and says the session may be open")
    func noBrowserForTheEndSessionPage() async throws {
        let env = try BrokerEnvironment(brokerEnvironment: ["BROWSER": "", "PATH": "/nonexistent"])
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(signOut.stderr.contains("browser session may still be open"), "\(signOut.stderr)")
        #expect(try currentUsername(env) == nil)
    }
}
