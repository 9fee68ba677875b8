import Foundation
import SharedDeviceClient
import Testing

/// `GetSignInOptions`: the sign-in buttons an app can show, from the configured provider's
/// discovery document and what the broker learnt of native authentication, over a private bus
/// with the real brokerd, brokerctl and idp-sim.
@Suite("Sign-in options of the configured provider", .serialized)
struct SignInOptionsTests {
    private func options(_ env: BrokerEnvironment, client: String = "mail-app") throws -> [String: Any] {
        let result = try env.brokerctl(["sign-in-options", "--client-id", client, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        return try result.json()
    }

    @Test("a provider with everything: every flow and Native SSO, the same to a client that is not ours")
    func fullProvider() throws {
        let env = try BrokerEnvironment()
        let json = try options(env)
        #expect(json["flows"] as? [String] == ["password", "email-code", "browser", "device-code", "ciba"], "\(json)")
        #expect(json["singleSignOn"] as? [String] == ["native-sso"], "\(json)")

        let raw = try env.gdbusCall(.getSignInOptions, ["calendar-app"])
        #expect(raw.status == 0, "\(raw.stderr)")
        #expect(
            raw.stdout.contains("'flows': <['password', 'email-code', 'browser', 'device-code', 'ciba']>"),
            "\(raw.stdout)")
        let text = try env.brokerctl(["sign-in-options", "--client-id", "mail-app"])
        #expect(text.stdout.contains("password, email-code, browser, device-code, ciba"), "\(text.stdout)")
        #expect(text.stdout.contains("native-sso"), "\(text.stdout)")
    }

    @Test(
        "without native authentication the email code is not listed: discovery's grants say so, or the endpoint's 404",
        arguments: [["--without", "native-auth"], ["--without", "native-auth", "--without", "grant-types"]])
    func withoutNativeAuthentication(idpArguments: [String]) throws {
        let env = try BrokerEnvironment(
            brokerArguments: ["--allow-password-grant"], idpArguments: idpArguments + SingleSignOnTests.plainProvider)
        // Discovery that lists its grant types without native authentication's rules it out; one
        // that lists none leaves the initiate endpoint to answer, which it does with 404.
        let before = try options(env)
        #expect(before["flows"] as? [String] == ["password", "browser", "device-code", "ciba"], "\(before)")
        #expect(before["singleSignOn"] as? [String] == [], "\(before)")

        let code = try env.brokerctl(
            [
                "sign-in", "--client-id", "mail-app", "--username", TestUsers.alice.username,
                "--code-stdin",
            ], stdin: "")
        #expect(code.status == 1)
        #expect(code.stderr.contains("io.shareddevice.Broker1.Error.NotSupported"), "\(code.stderr)")
        // Nothing else changed: the password grant still signs in.
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(
            try options(env, client: "calendar-app")["flows"] as? [String] == [
                "password", "browser", "device-code", "ciba",
            ])
    }

    @Test(
        "a provider that does not answer: ServerUnavailable, and the options once it is back; a bad clientId: InvalidArgument"
    )
    func errors() async throws {
        let env = try BrokerEnvironment()
        try await env.setProviderFault("unavailable", endpoint: "discovery")
        // brokerd reads discovery once it serves: a broker started under the fault has none cached.
        try env.restartBroker()
        let down = try env.brokerctl(["sign-in-options", "--client-id", "mail-app"], timeout: .seconds(60))
        #expect(down.status == 1)
        #expect(down.stderr.contains("io.shareddevice.Broker1.Error.ServerUnavailable"), "\(down.stderr)")
        try await env.setProviderFault("none")
        #expect(try options(env)["flows"] as? [String] == ["password", "email-code", "browser", "device-code", "ciba"])

        let bad = try env.gdbusCall(.getSignInOptions, ["''"])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("io.shareddevice.Broker1.Error.InvalidArgument"), "\(bad.stderr)")
    }
}
