import Foundation
import TestSupport
import Testing

/// brokerd must start, and answer what needs no provider, while the provider is unreachable:
/// D-Bus activation must never fail because the network is down. Discovery is tried again on
/// the next call that needs it. Access tokens are not kept across a restart, so the first silent
/// token after one needs the provider (a refresh).
@Suite("Starting while the provider is unreachable")
struct OfflineStartTests {
    @Test(
        "brokerd starts with the provider down, answers queries, says ServerUnavailable (for the first silent token too), and signs in once the provider is back"
    )
    func startsOffline() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let port = try #require(URLComponents(string: env.idp.baseURL)?.port)
        try await env.stopProvider()

        // Before the restart the cached token needs no provider.
        let cachedBefore = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(cachedBefore.status == 0, "a cached token needs no provider: \(cachedBefore.stderr)")

        // A restart with no provider: ready, and every query that needs no provider answers.
        try env.restartBroker()
        let info = try env.brokerctl(["device-info", "--json"])
        #expect(info.status == 0, "\(info.stderr)")
        let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        // Access tokens are in memory only: after the restart the silent call must refresh, and
        // says the provider is unavailable.
        let uncached = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(uncached.status == 1)
        #expect(uncached.stderr.contains("io.shareddevice.Broker1.Error.ServerUnavailable"), "\(uncached.stderr)")
        let offline = try env.brokerctl(["sign-out", "--client-id", "mail-app", "--json"])
        #expect(offline.status == 0, "sign-out works offline: \(offline.stderr)")
        // What the provider could not be told is owed: tried again later, and after a restart.
        #expect((try offline.json()["notes"] as? [String] ?? []).contains { $0.contains("revocation is pending") })
        let refused = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.ServerUnavailable"), "\(refused.stderr)")

        // The provider comes back on the same address: the next sign-in discovers it, without a restart.
        let directory = try TemporaryDirectory()
        let again = try IdpSim(in: directory, extraArguments: ["--port", String(port)])
        #expect(again.authority == env.idp.authority)
        let signedIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
    }
}
