import Foundation
import HTTP
import SharedDeviceClient
import TestSupport
import Testing

/// Sign in once, every app is signed in: after one app's sign-in, every other app gets tokens of
/// its own without a person, through each of the provider's mechanisms, over a private bus with
/// the real brokerd, brokerctl and idp-sim.
@Suite("Single sign-on across apps", .serialized)
struct SingleSignOnTests {
    private let alice = TestUsers.alice
    private let bob = TestUsers.bob

    /// idp-sim offering one mechanism only.
    static let providers: [(mechanism: String, idpArguments: [String])] = [
        ("native-sso", ["--without", "family-tokens", "--without", "token-exchange"]),
        ("family-refresh-token", ["--without", "native-sso", "--without", "token-exchange"]),
        ("token-exchange", ["--without", "native-sso", "--without", "family-tokens"]),
    ]
    static let plainProvider = ["--without", "native-sso", "--without", "family-tokens", "--without", "token-exchange"]

    @Test(
        "each mechanism: a second and a third app get tokens of their own, and none after the sign-out",
        arguments: providers.map(\.mechanism))
    func everyMechanism(mechanism: String) async throws {
        let idpArguments = try #require(Self.providers.first { $0.mechanism == mechanism }).idpArguments
        let env = try BrokerEnvironment(idpArguments: idpArguments)
        let signIn = try env.signIn(alice, client: "mail-app")
        #expect(signIn.status == 0, "\(signIn.stderr)")
        let mailToken = try #require(try signIn.json()["accessToken"] as? String)

        for app in ["calendar-app", "notes-app"] {
            let token = try env.brokerctl(["token", "--client-id", app, "--scope", "User.Read", "--json"])
            #expect(token.status == 0, "\(app): \(token.stderr)")
            let accessToken = try #require(try token.json()["accessToken"] as? String)
            #expect(accessToken != mailToken)
            let claims = try JWT.claims(accessToken)
            #expect(claims["azp"] as? String == app)
            #expect(claims["aud"] as? String == "https://graph.local")
            #expect((claims["scp"] as? String)?.split(separator: " ").contains("User.Read") == true)
            #expect(claims["preferred_username"] as? String == alice.username)
            let idToken = try #require(try token.json()["idToken"] as? String)
            #expect(try JWT.claims(idToken)["aud"] as? String == app)
            let me = try env.brokerctl(["me", "--client-id", app])
            #expect(me.status == 0 && me.stdout.contains(alice.name), "\(app): \(me.stdout) \(me.stderr)")
        }
        #expect(try await env.exchanges(mechanism) == 2)
        let info = try env.brokerctl(["device-info", "--json"]).json()
        #expect(info["singleSignOn"] as? [String] == [mechanism], "\(info)")

        // What the device's sign-in holds for single sign-on, before it ends.
        let state = try env.stateFile()
        let credential = try #require(SingleSignOnCredential(mechanism: mechanism, state: state, anchor: "mail-app"))

        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        for app in ["calendar-app", "notes-app", "sso-app-1"] {
            let after = try env.brokerctl(["token", "--client-id", app, "--scope", "User.Read"])
            #expect(after.status == 1)
            #expect(after.stderr.contains("io.shareddevice.Broker1.Error.NoAccount"), "\(after.stderr)")
        }
        // The provider refuses the device's old single sign-on credential too.
        let refused = try await credential.redeem(at: env.idp, for: "sso-app-1")
        #expect(refused.status == 400, "\(refused.status) \(refused.bodyText)")
        #expect(try env.stateFile()["singleSignOn"] == nil)
    }

    @Test(
        "an app the provider does not know is UnknownClient through each mechanism, as at a password sign-in",
        arguments: providers.map(\.mechanism))
    func unknownApp(mechanism: String) async throws {
        let idpArguments = try #require(Self.providers.first { $0.mechanism == mechanism }).idpArguments
        let env = try BrokerEnvironment(idpArguments: idpArguments)
        let signIn = try env.signIn(alice, client: "mail-app")
        #expect(signIn.status == 0, "\(signIn.stderr)")
        let token = try env.brokerctl(["token", "--client-id", "unknown-app", "--scope", "User.Read"])
        #expect(token.status == 1)
        #expect(token.stderr.contains("io.shareddevice.Broker1.Error.UnknownClient"), "\(token.stderr)")
        #expect(!token.stderr.contains("InteractionRequired") && !token.stderr.contains("interactively"))
        #expect(token.stderr.contains("registered"), "\(token.stderr)")
        let password = try env.signIn(alice, client: "unknown-app")
        #expect(password.stderr.contains("io.shareddevice.Broker1.Error.UnknownClient"), "\(password.stderr)")
        // The device's sign-in is untouched.
        let mail = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(mail.status == 0, "\(mail.stderr)")
    }

    @Test("every sign-in flow starts single sign-on: the email code and the browser, as the password does")
    func everySignInFlow() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--without", "family-tokens"])
        let carol = TestUsers.carol.username
        let code = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--username", carol, "--code-stdin"])
        try code.waitForLine(stderr: true) { $0.contains("code was sent") }
        try code.type(try #require(try await env.latestCode(for: carol)))
        #expect(try code.waitForExit(timeout: .seconds(20)) == 0, "\(code.allOutput)")
        let afterCode = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read", "--json"])
        #expect(afterCode.status == 0, "\(afterCode.stderr)")
        #expect(
            try JWT.claims(try #require(try afterCode.json()["accessToken"] as? String))["preferred_username"]
                as? String == carol)
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        // Shared mode ends the browser session on every sign-out: the browser loads the end-session page.
        #expect(try await env.browser.nextProviderURL().hasPrefix(env.idp.authority + "/oauth2/v2.0/logout?"))

        let browser = try env.startBrokerctl([
            "sign-in", "--client-id", "notes-app", "--interactive", "--scope", "User.Read",
        ])
        let url = try await env.browser.nextProviderURL()
        #expect(
            URLComponents(string: url)?.queryItems?.first { $0.name == "scope" }?.value?.contains("device_sso") == true,
            "\(url)")
        #expect(
            try await env.browser.signIn(at: url, username: alice.username, password: alice.password) != .signInForm)
        #expect(try browser.waitForExit(timeout: .seconds(20)) == 0, "\(browser.allOutput)")
        let afterBrowser = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read", "--json"])
        #expect(afterBrowser.status == 0, "\(afterBrowser.stderr)")
        #expect(
            try JWT.claims(try #require(try afterBrowser.json()["accessToken"] as? String))["azp"] as? String
                == "calendar-app")
        #expect(try await env.exchanges("native-sso") == 2)
    }

    @Test("a new user's sign-in gives every app the new user's tokens, never the previous user's")
    func newUser() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        #expect(try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read"]).status == 0)
        #expect(try env.brokerctl(["sign-out", "--client-id", "notes-app"]).status == 0)
        #expect(try env.signIn(bob, client: "notes-app").status == 0)
        for app in ["calendar-app", "mail-app"] {
            let token = try env.brokerctl(["token", "--client-id", app, "--scope", "User.Read", "--json"])
            #expect(token.status == 0, "\(token.stderr)")
            let claims = try JWT.claims(try #require(try token.json()["accessToken"] as? String))
            #expect(claims["preferred_username"] as? String == bob.username)
            #expect(claims["azp"] as? String == app)
        }
    }

    @Test("single sign-on survives a restart of brokerd")
    func restart() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--without", "family-tokens"])
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        try env.restartBroker()
        let token = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read", "--json"])
        #expect(token.status == 0, "\(token.stderr)")
        #expect(try await env.exchanges("native-sso") == 1)
    }

    @Test("a device secret revoked at the provider gives InteractionRequired and changes nothing else")
    func revokedDeviceSecret() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--without", "family-tokens"])
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let revoke = try await HTTPClient.shared.send(
            .postForm(
                env.idp.baseURL + "/test/revoke-device-secrets?username=" + HTTPRequest.percentEncode(alice.username),
                fields: []))
        #expect(revoke.status == 200, "\(revoke.bodyText)")
        let before = try env.stateFile()
        let refused = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(refused.stderr)")
        #expect(refused.stderr.contains("refused single sign-on"), "\(refused.stderr)")
        #expect(NSDictionary(dictionary: try env.stateFile()).isEqual(to: before))
        // The app that signed in is not affected.
        #expect(
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"]).status
                == 0)
    }

    @Test(
        "a plain provider: InteractionRequired saying so, no browser opened; interactive sign-in suggests the device's account"
    )
    func plainProvider() async throws {
        let env = try BrokerEnvironment(idpArguments: Self.plainProvider)
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let refused = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(refused.stderr)")
        #expect(refused.stderr.contains("offers no single sign-on between apps"), "\(refused.stderr)")
        #expect(env.browser.openedCount == 0)
        #expect(try env.brokerctl(["device-info"]).stdout.contains("none (each app signs in for itself)"))

        let interactive = try env.startBrokerctl([
            "sign-in", "--client-id", "calendar-app", "--interactive", "--scope", "User.Read",
        ])
        let url = try await env.browser.nextProviderURL()
        let hint = URLComponents(string: url)?.queryItems?.first { $0.name == "login_hint" }?.value
        #expect(hint == alice.username, "\(url)")
        #expect(
            try await env.browser.signIn(at: url, username: alice.username, password: alice.password) != .signInForm)
        #expect(try interactive.waitForExit(timeout: .seconds(20)) == 0, "\(interactive.allOutput)")
        #expect(try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read"]).status == 0)
    }

    @Test("concurrent first calls of 10 apps make one exchange each")
    func concurrentFirstCalls() async throws {
        let env = try BrokerEnvironment(idpArguments: ["--without", "family-tokens"])
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let configuration = BrokerClientConfiguration(busAddress: env.bus.address)
        let apps = try TestUsers.ssoApps.map { try PublicClientApplication(clientId: $0, configuration: configuration) }
        let tokens = try await withThrowingTaskGroup(of: (String, String).self) { group in
            for app in apps {
                for _ in 0..<3 {
                    group.addTask {
                        (
                            app.clientId,
                            try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"])).accessToken
                        )
                    }
                }
            }
            return try await group.reduce(into: [String: Set<String>]()) { $0[$1.0, default: []].insert($1.1) }
        }
        #expect(tokens.count == apps.count)
        // The three calls of each app shared one answer.
        #expect(tokens.values.allSatisfy { $0.count == 1 }, "\(tokens.mapValues(\.count))")
        #expect(try await env.exchanges("native-sso") == apps.count)
    }

    @Test("default mode: an app that asks for the account another app signed in gets its own tokens")
    func defaultMode() async throws {
        let env = try BrokerEnvironment(mode: "default")
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        let calendar = try PublicClientApplication(
            clientId: "calendar-app",
            configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let accounts = try await calendar.accounts()
        #expect(accounts.map(\.username) == [alice.username])
        let account = try #require(accounts.first)
        let token = try await calendar.acquireTokenSilent(
            SilentTokenParameters(scopes: ["User.Read"], account: account))
        #expect(try JWT.claims(token.accessToken)["azp"] as? String == "calendar-app")
    }
}

/// What the device's sign-in holds for single sign-on, read from state.json (the tests keep
/// tokens there), and presented to the provider directly, as a thief would.
private struct SingleSignOnCredential {
    let form: (String) -> [(String, String)]

    init?(mechanism: String, state: [String: Any], anchor: String) {
        switch mechanism {
        case "native-sso":
            guard let grant = (state["singleSignOn"] as? [String: Any])?.values.first as? [String: Any],
                let secret = grant["deviceSecret"] as? String, let idToken = grant["idToken"] as? String
            else { return nil }
            form = { client in
                [
                    ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"), ("client_id", client),
                    ("subject_token", idToken), ("subject_token_type", "urn:ietf:params:oauth:token-type:id_token"),
                    ("actor_token", secret), ("actor_token_type", "urn:openid:params:token-type:device-secret"),
                    ("scope", "openid User.Read"),
                ]
            }
        case "family-refresh-token", "token-exchange":
            guard
                let token = ((state["clients"] as? [String: Any])?[anchor] as? [String: Any])?["refreshToken"]
                    as? String
            else { return nil }
            form =
                mechanism == "family-refresh-token"
                ? { client in [("grant_type", "refresh_token"), ("client_id", client), ("refresh_token", token)] }
                : { client in
                    [
                        ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"), ("client_id", client),
                        ("subject_token", token),
                        ("subject_token_type", "urn:ietf:params:oauth:token-type:refresh_token"),
                    ]
                }
        default:
            return nil
        }
    }

    func redeem(at idp: IdpSim, for client: String) async throws -> HTTPResponse {
        try await HTTPClient.shared.send(.postForm(idp.authority + "/oauth2/v2.0/token", fields: form(client)))
    }
}

/// A JWT's claims, read without checking it: the tests look at what the provider issued.
enum JWT {
    static func claims(_ token: String) throws -> [String: Any] {
        let parts = token.split(separator: ".")
        guard parts.count == 3 else { throw ProcessFailure("not a JWT") }
        var payload = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        payload += String(repeating: "=", count: (4 - payload.count % 4) % 4)
        guard let data = Data(base64Encoded: payload),
            let claims = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { throw ProcessFailure("a JWT payload that is not JSON") }
        return claims
    }
}

extension BrokerEnvironment {
    /// How many single sign-on exchanges of `mechanism` idp-sim granted.
    func exchanges(_ mechanism: String) async throws -> Int {
        let key = mechanism == "family-refresh-token" ? "family-refresh" : mechanism
        return ((try await idpStats())["exchanges"] as? [String: Any])?[key] as? Int ?? 0
    }

    /// brokerd's state as its files hold it (state.json and its journal), as JSON.
    func stateFile() throws -> [String: Any] {
        try StateOnDisk.json(in: stateDirectory) ?? [:]
    }
}
