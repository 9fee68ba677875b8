import BrokerAPI
import Foundation
import HTTP
import SharedDeviceClient
import TestSupport
import Testing

/// Every way to sign in and the token lifecycle, over a private bus with the real
/// brokerd, brokerctl and idp-sim, and a test browser that posts the provider's real HTML form.
@Suite("Sign-in flows and the token lifecycle", .serialized)
struct SignInFlowTests {
    private let carol = TestUsers.carol.username
    private let alice = TestUsers.alice

    // MARK: Email one-time code

    @Test("brokerctl email code: typed wrong, then resend, then right; the old code no longer works")
    func emailCodeAtTheTerminal() async throws {
        let env = try BrokerEnvironment()
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--username", carol, "--json"])
        try ctl.waitForLine(stderr: true) { $0.contains("8-digit code was sent by email to") }
        let first = try #require(try await env.latestCode(for: carol))

        try ctl.type(ClientLibraryTests.wrongCode(than: first))
        try ctl.waitForLine(stderr: true) { $0.contains("brokerctl: io.shareddevice.Broker1.Error.InvalidCode: ") }
        try ctl.type("resend")
        try ctl.waitForLine(stderr: true) { $0.contains("A new code was sent") }
        let second = try #require(try await env.latestCode(for: carol))
        #expect(second != first)
        try ctl.type(first)
        try ctl.waitForLine(stderr: true, skipping: 1) { $0.contains("InvalidCode") }
        try ctl.type(second)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
        let result = try CommandResult(status: 0, stdout: ctl.stdoutText, stderr: "").json()
        #expect((result["account"] as? [String: Any])?["username"] as? String == carol)
        #expect(try env.brokerctl(["current-account", "--client-id", "notes-app"]).stdout.contains(carol))
    }

    @Test("a user without email codes is told so, and the other ways in; the demo users file has one with them")
    func userWithoutEmailCodes() async throws {
        let users = try String(contentsOfFile: ExamplesTests.examples + "/demo-users.json", encoding: .utf8)
        let env = try BrokerEnvironment(tenant: "contoso-demo", usersFile: users)
        let alice = try env.brokerctl(
            ["sign-in", "--client-id", "mail-app", "--username", self.alice.username, "--code-stdin"], stdin: "")
        #expect(alice.status == 1)
        #expect(alice.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(alice.stderr)")
        #expect(alice.stderr.contains("cannot send \(self.alice.username) a one-time code by email"), "\(alice.stderr)")
        for way in ["--password-stdin", "--device-code", "--interactive"] {
            #expect(alice.stderr.contains(way), "\(alice.stderr)")
        }
        #expect(try await env.outbox().isEmpty)

        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--username", carol])
        try ctl.waitForLine(stderr: true) { $0.contains("An 8-digit code was sent by email to") }
        try ctl.type(try #require(try await env.latestCode(for: carol)))
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
    }

    @Test("brokerctl watch says the broker left during a pending sign-in, goes on, and shows its return")
    func watchSeesTheBrokerLeave() async throws {
        let env = try BrokerEnvironment()
        let watch = try env.watch()
        defer { watch.signal(SIGTERM) }
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--username", carol])
        defer { ctl.kill() }
        try ctl.waitForLine(stderr: true) { $0.contains("code was sent") }
        _ = try env.brokerd.stop()
        try watch.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("the broker left the bus") }
        try env.restartBroker()
        try watch.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("broker-restarted: current none") }
    }

    @Test("an expired code gives CodeExpired and signs nobody in")
    func expiredCode() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--code-lifetime", "1"])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--username", carol, "--code-stdin"])
        try ctl.waitForLine(stderr: true) { $0.contains("code was sent") }
        let code = try #require(try await env.latestCode(for: carol))
        // The code's one-second life has to run out: this wait is what is being tested.
        try await Task.sleep(for: .milliseconds(1500))
        try ctl.type(code)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 1)
        #expect(ctl.stderrText.contains("io.shareddevice.Broker1.Error.CodeExpired"), "\(ctl.allOutput)")
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"] is NSNull)
    }

    @Test("unknown and malformed usernames get UserNotFound and InvalidUsername; no code is sent")
    func badUsernames() async throws {
        let env = try BrokerEnvironment()
        let unknown = try env.brokerctl(
            ["sign-in", "--client-id", "mail-app", "--username", "nobody@contoso.example", "--code-stdin"], stdin: "")
        #expect(unknown.status == 1)
        #expect(unknown.stderr.contains("io.shareddevice.Broker1.Error.UserNotFound"), "\(unknown.stderr)")
        let malformed = try env.brokerctl(
            ["sign-in", "--client-id", "mail-app", "--username", "two words", "--code-stdin"], stdin: "")
        #expect(malformed.status == 1)
        #expect(malformed.stderr.contains("io.shareddevice.Broker1.Error.InvalidUsername"), "\(malformed.stderr)")
        #expect(try await env.outbox().isEmpty)
    }

    @Test("a flow belongs to the connection that started it: another caller gets FlowNotFound and the flow survives")
    func flowBelongsToItsCaller() async throws {
        let env = try BrokerEnvironment()
        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let state = try await app.signIn(username: carol, scopes: ["User.Read"])
        let code = try #require(try await env.latestCode(for: carol))

        let stranger = try env.gdbusCall(.submitCode, [state.flowId, code])
        #expect(stranger.status != 0)
        #expect(stranger.stderr.contains("io.shareddevice.Broker1.Error.FlowNotFound"), "\(stranger.stderr)")
        let cancel = try env.gdbusCall(.cancelSignIn, [state.flowId])
        #expect(cancel.stderr.contains("io.shareddevice.Broker1.Error.FlowNotFound"), "\(cancel.stderr)")

        let result = try await state.submitCode(code)
        #expect(result.account.username == carol)
    }

    // MARK: Tokens

    @Test(
        "a token with less than the 5-minute margin left is refreshed: cached first, refreshed once it is short-lived")
    func refreshAfterShortLifetime() async throws {
        // 302 s of life: 2 s more than the broker's margin, so the token is cached for 2 s.
        let env = try BrokerEnvironment(idpArguments: ["--access-token-lifetime", "302"])
        let signedIn = try env.signIn(alice, client: "mail-app").json()
        let first = try #require(signedIn["accessToken"] as? String)
        let started = ContinuousClock.now

        let cached = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"]).json()
        #expect(cached["accessToken"] as? String == first)
        #expect(try await env.tokenRequests("refresh_token") == 0)

        // The token's life has to shrink below the margin: this wait is what is being tested.
        try await Task.sleep(until: started + .milliseconds(2500))
        let refreshed = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"]).json()
        let second = try #require(refreshed["accessToken"] as? String)
        #expect(second != first)
        #expect(try await env.tokenRequests("refresh_token") == 1)

        let again = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"]).json()
        #expect(again["accessToken"] as? String == second)
        #expect(try await env.tokenRequests("refresh_token") == 1)
    }

    @Test("a refresh token revoked at the provider gives InteractionRequired, and interactive sign-in recovers")
    func revokedRefreshToken() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let revoke = try await HTTPClient.shared.send(
            .postForm(
                env.idp.baseURL + "/test/revoke-all?username=" + HTTPRequest.percentEncode(alice.username), fields: []))
        #expect(revoke.status == 200)

        let refused = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(refused.stderr)")
        // Without a refresh token, the cache is not used either: the app must go interactive.
        let cachedToo = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(cachedToo.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(cachedToo.stderr)")

        let ctl = try env.startBrokerctl([
            "sign-in", "--client-id", "mail-app", "--interactive", "--prompt", "login",
            "--username", alice.username, "--scope", "User.Read",
        ])
        let url = try await env.browser.nextURL()
        #expect(
            try await env.browser.signIn(at: url, username: alice.username, password: alice.password) != .signInForm)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
        let recovered = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(recovered.status == 0, "\(recovered.stderr)")
    }

    @Test("concurrent silent requests for one app and scope set make exactly one refresh call (10 requests)")
    func concurrentSilentRequestsShareOneRefresh() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        // A slow provider keeps the first refresh in flight while the others arrive.
        try await env.setProviderFault("slow", count: 1, delayMs: 700)
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"], forceRefresh: true))
                        .accessToken
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(tokens.count == 1)
        #expect(try await env.tokenRequests("refresh_token") == 1)
    }

    @Test("forged ID tokens are refused: wrong key, wrong audience, wrong issuer, expired; nothing changes")
    func forgedIDTokens() async throws {
        let env = try BrokerEnvironment()
        for mode in ["idTokenWrongKey", "idTokenWrongAudience", "idTokenWrongIssuer", "idTokenExpired"] {
            try await env.setProviderFault(mode, count: 1)
            let attempt = try env.signIn(alice, client: "mail-app")
            #expect(attempt.status == 1, "\(mode)")
            #expect(
                attempt.stderr.contains("io.shareddevice.Broker1.Error.ServerError")
                    && attempt.stderr.contains("ID token is not valid"), "\(mode): \(attempt.stderr)")
            #expect(
                try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"] is NSNull,
                "\(mode)")
        }
        // The genuine provider is still believed.
        #expect(try env.signIn(alice, client: "mail-app").status == 0)

        // A forged answer to a refresh keeps the account and changes nothing.
        try await env.setProviderFault("idTokenWrongKey", count: 1)
        let refresh = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"])
        #expect(refresh.stderr.contains("ID token is not valid"), "\(refresh.stderr)")
        #expect(try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(alice.username))
    }

    @Test(
        "confidential clients authenticate with client_secret_basic and client_secret_post from brokerd's configuration"
    )
    func confidentialClients() async throws {
        let directory = try TemporaryDirectory()
        let clients = TestUsers.confidentialClients
        // One secret in a file of its own, one in the configuration: each readable by its owner alone.
        let secretFile = try directory.write("backoffice.secret", clients[0].secret + "\n")
        chmod(secretFile, 0o600)
        let config = try directory.write(
            "brokerd.json",
            """
            {"clients": [{"clientId": "mail-app"},
                         {"clientId": "\(clients[0].clientId)", "clientSecretFile": "\(secretFile)", \
            "clientSecretMethod": "client_secret_basic"},
                         {"clientId": "\(clients[1].clientId)", "clientSecret": "\(clients[1].secret)", \
            "clientSecretMethod": "client_secret_post"}]}
            """)
        chmod(config, 0o600)
        let env = try BrokerEnvironment(mode: "default", brokerArguments: ["--config", config])
        for client in clients {
            let signIn = try env.signIn(alice, client: client.clientId)
            #expect(signIn.status == 0, "\(client.clientId): \(signIn.stderr)")
            let refreshed = try env.brokerctl([
                "token", "--client-id", client.clientId, "--scope", "User.Read", "--force-refresh",
            ])
            #expect(refreshed.status == 0, "\(client.clientId): \(refreshed.stderr)")
        }
        // A clientId the configuration does not list is refused by the broker itself.
        let stranger = try env.signIn(alice, client: "notes-app")
        #expect(stranger.stderr.contains("io.shareddevice.Broker1.Error.UnknownClient"), "\(stranger.stderr)")
    }

    // MARK: Interactive, in the browser

    @Test(
        "interactive sign-in: PKCE S256, state, nonce and a loopback redirect; the form is posted like a browser would")
    func interactiveSignIn() async throws {
        let env = try BrokerEnvironment()
        let ctl = try env.startBrokerctl([
            "sign-in", "--client-id", "mail-app", "--interactive", "--scope", "User.Read", "--json",
        ])
        let url = try await env.browser.nextProviderURL()
        let query = try #require(URLComponents(string: url)?.queryItems).reduce(into: [String: String]()) {
            $0[$1.name] = $1.value
        }
        #expect(url.hasPrefix(env.idp.authority + "/oauth2/v2.0/authorize?"))
        #expect(query["code_challenge_method"] == "S256")
        #expect(query["code_challenge"]?.count == 43)
        #expect((query["state"]?.count ?? 0) >= 16 && (query["nonce"]?.count ?? 0) >= 16)
        #expect(query["redirect_uri"]?.hasPrefix("http://127.0.0.1:") == true)
        #expect(query["client_id"] == "mail-app" && query["response_type"] == "code")

        let outcome = try await env.browser.signIn(at: url, username: alice.username, password: alice.password)
        guard case .page(200, _) = outcome else {
            Issue.record("the browser ended on \(outcome)")
            return
        }
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")
        let result = try CommandResult(status: 0, stdout: ctl.stdoutText, stderr: "").json()
        #expect((result["account"] as? [String: Any])?["username"] as? String == alice.username)
        #expect(try await env.tokenRequests("authorization_code") == 1)

        // `me`: a silent token with User.Read, and the profile from the Graph-like API.
        let me = try env.brokerctl(["me", "--client-id", "mail-app"])
        #expect(me.status == 0, "\(me.stderr)")
        #expect(me.stdout.contains(alice.name) && me.stdout.contains(alice.username), "\(me.stdout)")
    }

    @Test("default mode: sign-out keeps the browser session unless --from-browser; then prompt=none is refused")
    func signOutFromBrowser() async throws {
        // Shared mode never lets a browser session sign anyone in (NextPersonTests); a personal
        // device keeps the provider's usual single sign-on in the browser.
        let env = try BrokerEnvironment(mode: "default")
        let interactive = ["sign-in", "--client-id", "mail-app", "--interactive"]
        let ctl = try env.startBrokerctl(interactive)
        let first = try await env.browser.nextProviderURL()
        #expect(!first.contains("max_age=") && !first.contains("prompt=login"), "\(first)")
        try await env.browser.signIn(at: first, username: alice.username, password: alice.password)
        #expect(try ctl.waitForExit(timeout: .seconds(20)) == 0, "\(ctl.allOutput)")

        // A plain sign-out: the provider still knows the browser, so prompt=none signs in without a form.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        #expect(env.browser.openedCount == 1)
        let silent = try env.startBrokerctl(interactive + ["--prompt", "none"])
        #expect(try await env.browser.visit(try await env.browser.nextURL()).outcome != .signInForm)
        #expect(try silent.waitForExit(timeout: .seconds(20)) == 0, "\(silent.allOutput)")

        // Sign-out from the browser opens the provider's end_session_endpoint, which ends the session.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app", "--from-browser"]).status == 0)
        let logout = try await env.browser.nextProviderURL()
        #expect(logout.hasPrefix(env.idp.authority + "/oauth2/v2.0/logout?"))
        try await env.browser.visit(logout)
        #expect(!env.browser.hasCookies(for: env.idp.baseURL))

        let refused = try env.startBrokerctl(interactive + ["--prompt", "none"])
        try await env.browser.visit(try await env.browser.nextURL())
        #expect(try refused.waitForExit(timeout: .seconds(20)) == 1)
        #expect(
            refused.stderrText.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(refused.allOutput)")
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"] is NSNull)
    }

    @Test("shared mode: prompt=none gets InteractionRequired at once, signed out or in, and no browser opens")
    func sharedModePromptNoneOpensNoBrowser() throws {
        // A short timeout only bounds the wait should a page open after all (the person never comes).
        let env = try BrokerEnvironment(brokerArguments: ["--interactive-timeout", "10"])
        let interactive = ["sign-in", "--client-id", "mail-app", "--interactive", "--prompt", "none"]
        let signedOut = try env.startBrokerctl(interactive)
        #expect(try signedOut.waitForExit(timeout: .seconds(15)) == 1)
        #expect(
            signedOut.stderrText.contains("io.shareddevice.Broker1.Error.InteractionRequired"),
            "\(signedOut.allOutput)")
        #expect(env.browser.openedCount == 0)

        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let signedIn = try env.startBrokerctl(interactive)
        #expect(try signedIn.waitForExit(timeout: .seconds(15)) == 1)
        #expect(
            signedIn.stderrText.contains("io.shareddevice.Broker1.Error.InteractionRequired"),
            "\(signedIn.allOutput)")
        #expect(env.browser.openedCount == 0)
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"]
                is [String: Any])
    }

    @Test("an interactive sign-in nobody finishes ends with Cancelled after the configured timeout (1 s)")
    func interactiveTimeout() async throws {
        let env = try BrokerEnvironment(brokerArguments: ["--interactive-timeout", "1"])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        _ = try await env.browser.nextURL()
        #expect(try ctl.waitForExit(timeout: .seconds(15)) == 1)
        #expect(ctl.stderrText.contains("io.shareddevice.Broker1.Error.Cancelled"), "\(ctl.allOutput)")
        // The flow is gone, and another sign-in works.
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
    }
}
