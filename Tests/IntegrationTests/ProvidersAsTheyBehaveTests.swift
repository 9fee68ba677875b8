import Foundation
import HTTP
import TestSupport
import Testing

/// Providers as they really behave (docs/providers.md): a web server in front of the provider that
/// answers every path it does not know with its login page, a provider that refuses revocation to
/// public clients, a provider that is down when a person asks for the browser. Real brokerd,
/// brokerctl and idp-sim over loopback.
@Suite("A server that answers unknown paths with its login page", .serialized)
struct LoginPageProviderTests {
    /// idp-sim without native authentication, whose unknown paths answer a login page, and whose
    /// discovery lists no grant types (as Entra's), so that only a try can tell.
    static let loginPageServer = [
        "--login-page-for-unknown-paths", "--without", "native-auth", "--without", "grant-types",
    ]

    @Test("the login page means no native authentication: no email code, the password grant signs in")
    func loginPageIsNotNativeAuthentication() async throws {
        let env = try BrokerEnvironment(brokerArguments: ["--allow-password-grant"], idpArguments: Self.loginPageServer)
        let alice = TestUsers.alice
        // What the server answers native authentication's first request: its login page.
        let page = try await HTTPClient.shared.send(
            .postForm(env.idp.authority + "/oauth2/v2.0/initiate", fields: [("client_id", "mail-app")]))
        #expect(page.status == 200 && page.header("content-type")?.hasPrefix("text/html") == true)

        // An emailed code: the provider offers none, said as such, not a provider's error.
        let code = try env.brokerctl(
            ["sign-in", "--client-id", "mail-app", "--username", alice.username, "--code-stdin"], stdin: "")
        #expect(code.status == 1)
        #expect(code.stderr.contains("io.shareddevice.Broker1.Error.NotSupported"), "\(code.stderr)")
        #expect(code.stderr.contains("no native authentication"), "\(code.stderr)")
        #expect(!code.stderr.contains("not JSON"), "\(code.stderr)")

        // A broker that has tried nothing yet: its options do not list the email code.
        try env.restartBroker(extraArguments: ["--allow-password-grant"])
        let options = try env.brokerctl(["sign-in-options", "--client-id", "mail-app", "--json"])
        #expect(options.status == 0, "\(options.stderr)")
        #expect(
            try options.json()["flows"] as? [String] == ["password", "browser", "device-code", "ciba"],
            "\(options.stdout)")

        // A password sign-in on a fresh broker: native authentication's initiate meets the page,
        // and the resource-owner password grant, which the administrator allowed, signs in.
        try env.restartBroker(extraArguments: ["--allow-password-grant"])
        let signIn = try env.signIn(alice, client: "mail-app")
        #expect(signIn.status == 0, "\(signIn.stderr)")
        #expect(!signIn.stderr.contains("ServerError"), "\(signIn.stderr)")
        #expect(try await env.tokenRequests("password") == 1)
    }

    @Test("discovery that lists its grants without native authentication's: the email code is not listed")
    func discoveryRulesNativeAuthenticationOut() throws {
        let env = try BrokerEnvironment(
            brokerArguments: ["--allow-password-grant"],
            idpArguments: ["--login-page-for-unknown-paths", "--without", "native-auth"])
        let options = try env.brokerctl(["sign-in-options", "--client-id", "mail-app", "--json"])
        #expect(options.status == 0, "\(options.stderr)")
        #expect(
            try options.json()["flows"] as? [String] == ["password", "browser", "device-code", "ciba"],
            "\(options.stdout)")
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
    }
}

@Suite("A provider that refuses to revoke a public client's tokens", .serialized)
struct RevocationRefusedTests {
    private func owed(_ env: BrokerEnvironment) throws -> [[String: Any]] {
        try env.stateFile()["pendingRevocations"] as? [[String: Any]] ?? []
    }

    private func revokeRequests(_ env: BrokerEnvironment) async throws -> Int {
        (try await env.idpStats())["revoke"] as? Int ?? 0
    }

    @Test("401 without a body: the sign-out says refused, and nothing stays owed, not even at the next start")
    func refusedWith401() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--refuse-revocation"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let result = try signOut.json()
        #expect(result["signedOut"] as? Bool == true)
        #expect(result["tokensRevoked"] as? Bool == false)
        let notes = result["notes"] as? [String] ?? []
        #expect(notes.contains { $0.contains("refuses to revoke tokens of this public client (HTTP 401)") }, "\(notes)")
        #expect(!notes.contains { $0.contains("pending") || $0.contains("did not answer") }, "\(notes)")
        #expect(try env.stateFile()["current"] == nil, "the sign-out stands")
        let owing = try owed(env)
        #expect(owing.isEmpty, "a refusal is not owed: \(owing)")

        let asked = try await revokeRequests(env)
        try env.restartBroker()
        #expect(try env.brokerctl(["device-info"]).status == 0)
        #expect(try await revokeRequests(env) == asked, "the restarted broker asks nothing again")
    }

    @Test("503 stays owed and is tried again; the refusal that answers the retry ends it, logged once")
    func outageThenRefusal() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--refuse-revocation"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        // Every try of the sign-out's revocations meets the outage; the retry two seconds later the refusal.
        try await env.setProviderFault("unavailable", count: 6, endpoint: "revoke")
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let notes = try signOut.json()["notes"] as? [String] ?? []
        #expect(notes.contains { $0.contains("revocation is pending") }, "\(notes)")
        #expect(try !owed(env).isEmpty, "an outage stays owed")

        _ = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(30), stderr: true) {
                $0.contains("revocation: a token could not be revoked")
            }
        }
        #expect(try owed(env).isEmpty)
        _ = try env.brokerd.stop()
        let refusals = env.brokerd.process.stderrLines.filter { $0.contains("refuses to revoke tokens") }
        #expect(refusals.count == 1, "\(refusals)")
    }
}

@Suite("A browser sign-in while the provider is down")
struct ProviderDownBrowserSignInTests {
    @Test("ServerUnavailable within seconds, and no browser is asked to open anything")
    func providerDown() async throws {
        let env = try BrokerEnvironment()
        // brokerd has read discovery: only the provider's own answer can tell it is gone.
        #expect(try env.brokerctl(["sign-in-options", "--client-id", "mail-app"]).status == 0)
        env.idp.process.signal(SIGTERM)
        #expect(try env.idp.process.waitForExit(timeout: .seconds(10)) == 0)

        let started = ContinuousClock.now
        let signIn = try env.brokerctl(["sign-in", "--client-id", "mail-app", "--interactive"], timeout: .seconds(40))
        let took = ContinuousClock.now - started
        #expect(signIn.status == 1)
        #expect(signIn.stderr.contains("io.shareddevice.Broker1.Error.ServerUnavailable"), "\(signIn.stderr)")
        #expect(signIn.stderr.contains("could not be reached"), "\(signIn.stderr)")
        #expect(took < .seconds(10), "\(took)")
        #expect(env.browser.openedCount == 0)
    }
}

/// A provider whose ID tokens carry only the claims OpenID Connect requires, the person's names
/// being in userinfo (Core 5.4 allows it; glewlwyd's CIBA tokens are so): brokerd reads them
/// there, for the same subject only, and a userinfo that fails leaves the sign-in standing.
@Suite("ID tokens without the person's names", .serialized)
struct NamesInUserinfoTests {
    @Test("the names come from userinfo: every app sees alice, not her sub; without userinfo, her sub")
    func namesFromUserinfo() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--names-in-userinfo-only"])
        let signedIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        let current = try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"]).json()
        let account = current["current"] as? [String: Any]
        #expect(account?["username"] as? String == TestUsers.alice.username, "\(current)")
        #expect(account?["name"] as? String == TestUsers.alice.name, "\(current)")
        #expect((try await env.idpStats())["userinfo"] as? Int ?? 0 >= 1)
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)

        // Userinfo down: the sign-in stands, shown by the ID token's sub, and the log says why.
        try await env.setFault("unavailable", endpoint: "userinfo", count: 100)
        let second = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(second.status == 0, "\(second.stderr)")
        let shown = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        let username = (shown["current"] as? [String: Any])?["username"] as? String
        #expect(username != nil && username != TestUsers.alice.username, "\(shown)")
        _ = try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("userinfo could not be read")
        }
    }
}
