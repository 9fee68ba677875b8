import Foundation
import HTTP
import TestSupport
import Testing

/// A sign-out owes the provider the revocation of every refresh token and device secret of the
/// sign-in it ended (RFC 7009). The debt is written with the sign-out itself, beside the tokens,
/// so a broker killed before the provider answered, or a provider that was down, still pays it:
/// after the restart, or later with back-off. Real brokerd and idp-sim; the state file holds the
/// tokens here (`plaintext-file`), so the test can see what is owed.
@Suite("Revocations owed to the provider", .serialized)
struct OwedRevocationTests {
    private func refreshToken(_ env: BrokerEnvironment, _ client: String) throws -> String? {
        ((try env.stateFile()["clients"] as? [String: Any])?[client] as? [String: Any])?["refreshToken"] as? String
    }

    private func owed(_ env: BrokerEnvironment) throws -> [[String: Any]] {
        try env.stateFile()["pendingRevocations"] as? [[String: Any]] ?? []
    }

    private func revokeRequests(_ env: BrokerEnvironment) async throws -> Int {
        (try await env.idpStats())["revoke"] as? Int ?? 0
    }

    /// Waits (at most `timeout`) until `condition` holds.
    private func eventually(
        _ what: String, timeout: Duration = .seconds(30), _ condition: () async throws -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        while try await !condition() {
            guard ContinuousClock.now < deadline else {
                throw ProcessFailure("\(what) did not happen within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(100))  // polling the provider's and the file's state
        }
    }

    /// The provider's answer to `refreshToken` (the token is spent if it still worked).
    private func redeem(_ env: BrokerEnvironment, _ refreshToken: String) async throws -> HTTPResponse {
        try await HTTPClient.shared.send(
            .postForm(
                env.idp.authority + "/oauth2/v2.0/token",
                fields: [
                    ("grant_type", "refresh_token"), ("client_id", "mail-app"), ("refresh_token", refreshToken),
                ]))
    }

    @Test("brokerd SIGKILLed while the provider revokes: the restarted broker revokes what it owed")
    func killedDuringRevocation() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let token = try #require(try refreshToken(env, "mail-app"))
        // The provider holds every revocation for a long time: brokerd is killed before any answer.
        try await env.setProviderFault("slow", count: 8, delayMs: 60_000, endpoint: "revoke")
        let signOut = try env.startBrokerctl(["sign-out", "--client-id", "calendar-app"])
        try await eventually("a revocation request") { try await revokeRequests(env) >= 1 }
        let before = try await revokeRequests(env)
        #expect(try owed(env).contains { $0["token"] as? String == token }, "the debt is written with the sign-out")
        env.brokerd.process.signal(SIGKILL)
        _ = try signOut.waitForExit(timeout: .seconds(10))

        try await env.setProviderFault("none", endpoint: "revoke")
        try env.restartBroker()
        try await eventually("the restarted broker's revocations") {
            try await revokeRequests(env) > before && owed(env).isEmpty
        }
        let refused = try await redeem(env, token)
        #expect(refused.status == 400 && refused.bodyText.contains("invalid_grant"), "\(refused.bodyText)")
        #expect(try env.stateFile()["current"] == nil)
    }

    @Test("the provider down during the sign-out: the result says revocation is pending, and it is done later")
    func providerDownDuringSignOut() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let token = try #require(try refreshToken(env, "mail-app"))
        // Every try of the sign-out's revocations fails; the broker's retry two seconds later does not.
        try await env.setProviderFault("unavailable", count: 6, endpoint: "revoke")
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let result = try signOut.json()
        #expect(result["tokensRevoked"] as? Bool == false)
        #expect(
            (result["notes"] as? [String])?.contains { $0.contains("revocation is pending") } == true, "\(result)")
        #expect(try env.stateFile()["current"] == nil, "the sign-out stands")
        try await eventually("the retried revocations") { try owed(env).isEmpty }
        let refused = try await redeem(env, token)
        #expect(refused.status == 400 && refused.bodyText.contains("invalid_grant"), "\(refused.bodyText)")
    }
}
