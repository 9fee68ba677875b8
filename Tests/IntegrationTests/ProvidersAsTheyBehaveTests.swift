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
            try options.json()["flows"] as? [String] == ["password", "browser", "device-code"], "\(options.stdout)")

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
            try options.json()["flows"] as? [String] == ["password", "browser", "device-code"], "\(options.stdout)")
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
    }
}
