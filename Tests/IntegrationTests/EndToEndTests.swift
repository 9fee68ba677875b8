import Foundation
import HTTP
import TestSupport
import Testing

/// The whole product over a private bus: real brokerd, brokerctl and idp-sim processes, real
/// HTTP over loopback.
@Suite("End to end: brokerd, brokerctl and idp-sim", .serialized)
struct EndToEndTests {
    @Test("two apps see one sign-out, and the signal reaches a watcher once per change")
    func twoAppsSeeOneSignOut() throws {
        let env = try BrokerEnvironment()
        let watcher = try env.watch()

        let signIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signIn.status == 0, "\(signIn.stderr)")
        let accessToken = try #require(try signIn.json()["accessToken"] as? String)

        for client in ["mail-app", "calendar-app"] {
            let seen = try env.brokerctl(["current-account", "--client-id", client, "--json"]).json()
            #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        }

        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app"])
        #expect(signOut.status == 0, "\(signOut.stderr)")

        // mail-app saw alice last time: now (none, alice) once, then (none, none).
        let first = try env.brokerctl(["current-account", "--client-id", "mail-app"])
        #expect(first.stdout.contains("Current account:   none"))
        #expect(first.stdout.contains("Previous account:  \(TestUsers.alice.username)"))
        #expect(first.stdout.contains("Account \(TestUsers.alice.username) has been signed out."))
        let second = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        #expect(second["current"] is NSNull && second["previous"] is NSNull)

        try watcher.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("signed-out") }
        let changes = watcher.stdoutLines.filter { $0.hasPrefix("signed-") }
        #expect(changes.count == 2)
        #expect(changes.first?.hasPrefix("signed-in: current \(TestUsers.alice.username)") == true)
        // A signal never carries a token.
        #expect(!watcher.allOutput.contains(accessToken))
    }

    @Test("a restarted broker keeps the account and every app's previous account")
    func restartKeepsState() throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        _ = try env.brokerctl(["current-account", "--client-id", "calendar-app"])
        #expect(try env.brokerd.stop() == 0)

        // State on disk: directory 0700, file 0600.
        let attributes = try FileManager.default.attributesOfItem(atPath: env.stateDirectory + "/state.json")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let dirAttributes = try FileManager.default.attributesOfItem(atPath: env.stateDirectory)
        #expect((dirAttributes[.posixPermissions] as? Int) == 0o700)

        try env.restartBroker()
        let seen = try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"]).json()
        #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        #expect((seen["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)

        // Tokens survive too: the cached one is served without a provider call.
        let token = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
        #expect(token.status == 0, "\(token.stderr)")
    }

    @Test("shared mode holds one account; the same user may sign in again from another app")
    func oneAccountPerDevice() throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let bob = try env.signIn(TestUsers.bob, client: "calendar-app")
        #expect(bob.status == 1)
        #expect(bob.stderr.contains("io.shareddevice.Broker1.Error.AccountAlreadySignedIn"))
        #expect(try env.signIn(TestUsers.alice, client: "calendar-app").status == 0)
        let accounts = try env.brokerctl(["accounts", "--client-id", "notes-app"])
        #expect(accounts.stdout.contains(TestUsers.alice.username))
    }

    @Test("wrong password and unknown user get their own errors and change nothing")
    func signInErrors() throws {
        let env = try BrokerEnvironment()
        let wrong = try env.signIn((TestUsers.alice.username, "not-the-password", ""), client: "mail-app")
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("io.shareddevice.Broker1.Error.InvalidPassword"))
        #expect(!wrong.stderr.contains("not-the-password"))
        let nobody = try env.signIn(("nobody@contoso.example", "whatever", ""), client: "mail-app")
        #expect(nobody.stderr.contains("io.shareddevice.Broker1.Error.UserNotFound"))
        // A user who has no password: the provider answers `redirect`, the browser it is.
        let codeOnly = try env.signIn((TestUsers.carol.username, "whatever", ""), client: "mail-app")
        #expect(codeOnly.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(codeOnly.stderr)")
        let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        #expect(seen["current"] is NSNull)
    }

    @Test("silent tokens: cached, then refreshed on --force-refresh with a rotated refresh token; Graph accepts them")
    func silentTokens() async throws {
        let env = try BrokerEnvironment()
        let signIn = try env.signIn(TestUsers.alice, client: "mail-app")
        let first = try #require(try signIn.json()["accessToken"] as? String)

        let cached = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"]).json()
        #expect(cached["accessToken"] as? String == first)
        let refreshed = try env.brokerctl([
            "token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh", "--json",
        ]).json()
        let second = try #require(refreshed["accessToken"] as? String)
        #expect(second != first)
        let stats = try await env.idpStats()
        #expect((stats["token"] as? [String: Any])?["refresh_token"] as? Int == 1)

        // Another app gets a token of its own through single sign-on, never mail-app's.
        let other = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read", "--json"]).json()
        let otherToken = try #require(other["accessToken"] as? String)
        #expect(otherToken != first && otherToken != second)
        #expect(try JWT.claims(otherToken)["azp"] as? String == "calendar-app")

        // The token works at the Graph-like endpoint.
        let me = try await HTTPClient.shared.send(
            .get(
                env.idp.baseURL + "/v1.0/me",
                headers: [HTTPHeader("Authorization", "Bearer \(second)")]))
        #expect(me.status == 200)
        #expect(me.bodyText.contains(TestUsers.alice.username))
    }

    @Test("sign-out revokes the refresh token and the device secret at the provider")
    func signOutRevokes() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(try env.brokerctl(["sign-out", "--client-id", "notes-app"]).status == 0)
        let stats = try await env.idpStats()
        #expect(stats["revoke"] as? Int == 2)
        let again = try env.brokerctl(["sign-out", "--client-id", "notes-app"])
        #expect(again.stderr.contains("io.shareddevice.Broker1.Error.NoAccount"))
    }

    @Test("default mode: one account per app, sign-out removes only that app's")
    func defaultMode() throws {
        let env = try BrokerEnvironment(mode: "default")
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(try env.signIn(TestUsers.bob, client: "calendar-app").status == 0)
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        #expect(try env.brokerctl(["accounts", "--client-id", "calendar-app"]).stdout.contains(TestUsers.bob.username))
        // Alice is gone from mail-app; what it is offered now is bob, whom calendar-app signed in.
        let mailAccounts = try env.brokerctl(["accounts", "--client-id", "mail-app"]).stdout
        #expect(
            !mailAccounts.contains(TestUsers.alice.username) && mailAccounts.contains(TestUsers.bob.username),
            "\(mailAccounts)")
        let info = try env.brokerctl(["device-info", "--json"]).json()
        #expect(info["deviceMode"] as? String == "default")
    }

    @Test("device-info, current-account and accounts without a broker on the bus: ServiceUnknown and status 1, at once")
    func queriesWithoutBroker() throws {
        let env = try BrokerEnvironment()
        #expect(try env.brokerd.stop() == 0)
        for arguments in [
            ["device-info"], ["current-account", "--client-id", "mail-app"], ["accounts", "--client-id", "mail-app"],
        ] {
            let clock = ContinuousClock()
            let start = clock.now
            let result = try env.brokerctl(arguments)
            #expect(clock.now - start < .seconds(5), "\(arguments)")
            #expect(result.status == 1, "\(arguments)")
            #expect(result.stdout.isEmpty, "\(arguments)")
            #expect(
                result.stderr.hasPrefix(
                    "brokerctl: org.freedesktop.DBus.Error.ServiceUnknown: the broker is not running on this bus"),
                "\(arguments): \(result.stderr)")
        }
        let noBus = try ChildProcess(
            "brokerctl", executable: Binaries.path("brokerctl"),
            arguments: ["device-info", "--address", "unix:path=\(env.directory.path)/no-such-bus"])
        #expect(try noBus.waitForExit(timeout: .seconds(10)) == 1)
        // No bus is not a bus without the broker: said as such, with the address and the reason.
        #expect(
            noBus.stderrText.hasPrefix(
                "brokerctl: org.freedesktop.DBus.Error.NoServer: could not connect to the bus at unix:path="
                    + "\(env.directory.path)/no-such-bus: "), "\(noBus.stderrText)")
    }

    @Test("device-info shows the mode, version, device id, tenant and authority")
    func deviceInfo() throws {
        let env = try BrokerEnvironment(brokerArguments: [])
        let info = try env.brokerctl(["device-info", "--json"]).json()
        #expect(info["deviceMode"] as? String == "shared")
        #expect(info["authority"] as? String == env.idp.authority)
        #expect((info["deviceId"] as? String)?.isEmpty == false)
        let text = try env.brokerctl(["device-info"])
        #expect(text.stdout.contains("Device mode:"))
    }
}
