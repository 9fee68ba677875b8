import Foundation
import TestSupport
import Testing

/// What an app's sign-in means for its later silent calls: scopes beyond its grant come without
/// a person through each single sign-on mechanism, and where none can give them the error names
/// the call and the scopes; the administrator's `defaultScopes` widen every sign-in up front.
/// Over a private bus with the real brokerd, brokerctl and idp-sim.
@Suite("Scopes beyond an app's grant, and default scopes", .serialized)
struct ScopeRuleTests {
    private let alice = TestUsers.alice
    static let advice =
        "sign in again with them: AcquireTokenInteractive (or SignInWithPassword/StartSignIn) with scopes"

    @Test("AcquireTokenSilent takes empty scopes, as docs/dbus-api.md says: the reserved scopes alone")
    func emptyScopes() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        for app in ["mail-app", "calendar-app"] {
            let token = try env.gdbusCall(.acquireTokenSilent, [app, "[]", "", "{}"])
            #expect(token.status == 0, "\(app): \(token.stderr)")
            #expect(token.stdout.contains("'scopes': <['offline_access', 'openid', 'profile']>"), "\(token.stdout)")
        }
    }

    @Test(
        "each mechanism: wider scopes without a browser, for an app given single sign-on and the one that signed in",
        arguments: SingleSignOnTests.providers.map(\.mechanism))
    func widerScopesThroughSingleSignOn(mechanism: String) async throws {
        let idpArguments = try #require(SingleSignOnTests.providers.first { $0.mechanism == mechanism }).idpArguments
        let env = try BrokerEnvironment(idpArguments: idpArguments)
        #expect(try env.signIn(alice, client: "mail-app", scopes: ["User.Read"]).status == 0)
        let first = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read", "--json"])
        #expect(first.status == 0, "\(first.stderr)")

        // idp-sim refuses the refresh for a scope beyond the grant; single sign-on gives it.
        let wider = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "Mail.Read", "--json"])
        #expect(wider.status == 0, "\(wider.stderr)")
        let claims = try JWT.claims(try #require(try wider.json()["accessToken"] as? String))
        #expect(claims["azp"] as? String == "calendar-app")
        #expect((claims["scp"] as? String)?.split(separator: " ").contains("Mail.Read") == true, "\(claims)")
        #expect(try await env.exchanges(mechanism) == 2)
        #expect(env.browser.openedCount == 0)
        // Its new refresh token serves the wider scopes from now on.
        #expect(
            try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "Mail.Read", "--force-refresh"])
                .status == 0)

        // The app whose sign-in anchors single sign-on: its own family refresh token is refused
        // the same way, Native SSO and token exchange still give the scopes.
        let anchor = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "Mail.Read", "--json"])
        if mechanism == "family-refresh-token" {
            #expect(anchor.status == 1)
            #expect(anchor.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(anchor.stderr)")
            #expect(anchor.stderr.contains("\(Self.advice) User.Read Mail.Read"), "\(anchor.stderr)")
        } else {
            #expect(anchor.status == 0, "\(anchor.stderr)")
            let anchorClaims = try JWT.claims(try #require(try anchor.json()["accessToken"] as? String))
            #expect(anchorClaims["azp"] as? String == "mail-app")
            #expect((anchorClaims["scp"] as? String)?.split(separator: " ").contains("Mail.Read") == true)
            #expect(try await env.exchanges(mechanism) == 3)
        }
        #expect(env.browser.openedCount == 0)
    }

    @Test("no single sign-on: the error names the call and the scopes, and the refresh token keeps its own")
    func withoutSingleSignOn() async throws {
        let env = try BrokerEnvironment(idpArguments: SingleSignOnTests.plainProvider)
        #expect(try env.signIn(alice, client: "mail-app", scopes: ["User.Read"]).status == 0)
        let refreshToken = try Self.refreshToken(of: "mail-app", in: env)

        let refused = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "Mail.Read"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(refused.stderr)")
        #expect(
            refused.stderr.contains("the provider gives scopes Mail.Read only with the user's consent"),
            "\(refused.stderr)")
        #expect(refused.stderr.contains("was not part of the original grant"), "\(refused.stderr)")
        #expect(refused.stderr.contains("\(Self.advice) User.Read Mail.Read"), "\(refused.stderr)")
        #expect(env.browser.openedCount == 0)
        #expect(try Self.refreshToken(of: "mail-app", in: env) == refreshToken)
        let own = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"])
        #expect(own.status == 0, "\(own.stderr)")

        // The advice works: a sign-in with both scopes, then both are silent.
        #expect(try env.signIn(alice, client: "mail-app", scopes: ["User.Read", "Mail.Read"]).status == 0)
        let after = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "Mail.Read", "--force-refresh"])
        #expect(after.status == 0, "\(after.stderr)")
    }

    @Test("defaultScopes: a password sign-in with no scopes gets them, and a silent call for them is the cache's")
    func defaultScopes() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write(
            "brokerd.json",
            #"""
            {"clients": [{"clientId": "mail-app", "defaultScopes": ["User.Read", "Mail.Read"]},
                         {"clientId": "calendar-app"}]}
            """#)
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        let signIn = try env.signIn(alice, client: "mail-app", scopes: [])
        #expect(signIn.status == 0, "\(signIn.stderr)")
        let scopes = try #require(try signIn.json()["scopes"] as? [String])
        #expect(scopes.contains("User.Read") && scopes.contains("Mail.Read"), "\(scopes)")
        let claims = try JWT.claims(try #require(try signIn.json()["accessToken"] as? String))
        #expect((claims["scp"] as? String)?.split(separator: " ").contains("Mail.Read") == true, "\(claims)")

        let refreshes = try await env.tokenRequests("refresh_token")
        let silent = try env.brokerctl([
            "token", "--client-id", "mail-app", "--scope", "Mail.Read", "--scope", "User.Read", "--json",
        ])
        #expect(silent.status == 0, "\(silent.stderr)")
        #expect(try silent.json()["accessToken"] as? String == signIn.json()["accessToken"] as? String)
        #expect(try await env.tokenRequests("refresh_token") == refreshes)
        // And the grant holds them: a refresh for them is not refused.
        #expect(
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "Mail.Read", "--force-refresh"])
                .status == 0)
    }

    @Test(
        "a misspelt or mistyped defaultScopes stops brokerd at start, naming it",
        arguments: [
            (
                #"{"clients": [{"clientId": "mail-app", "defaultScope": ["User.Read"]}]}"#,
                #"unknown key "defaultScope""#
            ),
            (
                #"{"clients": [{"clientId": "mail-app", "defaultScopes": "User.Read"}]}"#,
                #"clients[0].defaultScopes is "User.Read"; it takes an array of strings"#
            ),
            (
                #"{"clients": [{"clientId": "mail-app", "defaultScopes": [true]}]}"#,
                "clients[0].defaultScopes is [true]; it takes an array of strings"
            ),
        ] as [(String, String)])
    func refusedAtStart(_ text: String, _ why: String) throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("brokerd.json", text)
        let state = directory.path + "/state"
        let brokerd = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", "unix:path=\(directory.path)/no-bus", "--authority", "http://127.0.0.1:9",
                "--state-dir", state, "--config", config,
            ])
        #expect(try brokerd.waitForExit(timeout: .seconds(10)) == 1, "\(brokerd.stderrText)")
        #expect(brokerd.stderrText.contains("brokerd: the configuration file \(config)"), "\(brokerd.stderrText)")
        #expect(brokerd.stderrText.contains(why), "\(brokerd.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: state))
    }

    /// The refresh token brokerd keeps for `client` (the tests keep tokens in state.json).
    static func refreshToken(of client: String, in env: BrokerEnvironment) throws -> String? {
        ((try env.stateFile()["clients"] as? [String: Any])?[client] as? [String: Any])?["refreshToken"] as? String
    }
}
