import BrokerAPI
import Foundation
import HTTP
import SharedDeviceClient
import TestSupport
import Testing

/// A plainer provider: no revocation, no end_session, no native authentication. The broker
/// signs in with the standard password grant, signs out anyway, and says what it could not do.
@Suite("A provider with only the standard endpoints")
struct PlainProviderTests {
    @Test(
        "without native auth, revocation and end_session: password grant where allowed, sign-out with notes, code flow refused clearly"
    )
    func plainProvider() async throws {
        let env = try BrokerEnvironment(idpArguments: [
            "--without", "revocation", "--without", "end-session", "--without", "native-auth",
        ])
        let alice = TestUsers.alice
        // The resource-owner password grant is deprecated (RFC 9700): only where the administrator allows it.
        let refused = try env.signIn(alice, client: "mail-app")
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.NotSupported"), "\(refused.stderr)")
        #expect(refused.stderr.contains("RFC 9700") && refused.stderr.contains("allowPasswordGrant"))
        #expect(try await env.tokenRequests("password") == 0)
        try env.restartBroker(extraArguments: ["--allow-password-grant"])
        #expect(try env.signIn(alice, client: "mail-app").status == 0)
        #expect(try await env.tokenRequests("password") == 1)

        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--from-browser", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let result = try signOut.json()
        #expect(result["signedOut"] as? Bool == true)
        #expect(result["tokensRevoked"] as? Bool == false)
        #expect(result["browserSessionEnded"] as? Bool == false)
        #expect(result["browserLogoutOpened"] as? Bool == false)
        let notes = result["notes"] as? [String] ?? []
        #expect(
            notes.contains { $0.contains("no token revocation") }
                && notes.contains { $0.contains("no end_session_endpoint") }, "\(notes)")
        #expect(env.browser.openedCount == 0)
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"] is NSNull)

        // Without native authentication there is no emailed code: the app is told to go to the browser.
        let code = try env.brokerctl(
            ["sign-in", "--client-id", "mail-app", "--username", alice.username, "--code-stdin"], stdin: "")
        #expect(code.status == 1)
        #expect(
            code.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired")
                || code.stderr.contains("io.shareddevice.Broker1.Error.NotSupported"), "\(code.stderr)")
    }

    @Test("with every endpoint, sign-out says it revoked the tokens and opened the provider's sign-out page")
    func fullProvider() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "mail-app", "--from-browser", "--json"])
        let result = try signOut.json()
        #expect(result["tokensRevoked"] as? Bool == true)
        // brokerd handed the page to the browser; it cannot know the provider ended its session.
        #expect(result["browserLogoutOpened"] as? Bool == true, "\(signOut.stdout)")
        #expect(result["browserSessionEnded"] as? Bool == false, "\(signOut.stdout)")
        #expect((result["notes"] as? [String])?.isEmpty == true)
        #expect(try await env.browser.nextProviderURL().hasPrefix(env.idp.authority + "/oauth2/v2.0/logout?"))
    }

    /// What an app of any library reads on the bus: every key of the result, the new one beside
    /// the deprecated one, which a password sign-in (an ID token without `sid`) never makes true.
    @Test("SignOut's reply on the bus: browserLogoutOpened true, browserSessionEnded false, every key present")
    func signOutResultKeysOnTheBus() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let reply = try env.gdbusCall(.signOut, ["mail-app", "", "{'signoutFromBrowser': <true>}"])
        #expect(reply.status == 0, "\(reply.stderr)")
        let keys = reply.stdout.matches(of: try Regex("'([A-Za-z]+)': <")).compactMap {
            $0.output[1].substring.map(String.init)
        }
        #expect(
            keys == [
                "browserLogoutOpened", "browserSessionEnded", "cause", "cleanedUp", "cleanedUpCount", "notCleanedUp",
                "notCleanedUpCount", "notes", "tokensRevoked",
            ], "\(reply.stdout)")
        #expect(reply.stdout.contains("'browserLogoutOpened': <true>"), "\(reply.stdout)")
        #expect(reply.stdout.contains("'browserSessionEnded': <false>"), "\(reply.stdout)")
        #expect(try await env.browser.nextProviderURL().hasPrefix(env.idp.authority + "/oauth2/v2.0/logout?"))

        // Signed in again and out in words: the person reads what was done, and no more.
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let text = try env.brokerctl(["sign-out", "--client-id", "mail-app", "--from-browser"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("sign-out page was opened in the browser"), "\(text.stdout)")
        #expect(text.stdout.contains("not known"), "\(text.stdout)")
    }
}
