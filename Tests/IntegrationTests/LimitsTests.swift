import BrokerAPI
import Foundation
import SharedDeviceClient
import Testing

/// A caller that floods the broker gets `LimitsExceeded`, not a broker that grows without bound.
@Suite("Limits on what one caller may hold")
struct LimitsTests {
    @Test("one connection with 300 calls in flight: 256 are served, 44 get LimitsExceeded, and the broker goes on")
    func callsInFlightPerConnection() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        // A slow refresh holds every call (they share it) until all 300 have arrived.
        try await env.setProviderFault("slow", count: 1, delayMs: 1500)
        let outcomes = await withTaskGroup(of: BrokerError?.self) { group in
            for _ in 0..<300 {
                group.addTask { await Self.forceRefresh(app) }
            }
            return await group.reduce(into: [BrokerError?]()) { $0.append($1) }
        }
        let refused = outcomes.compactMap { $0 }
        #expect(outcomes.filter { $0 == nil }.count == 256)
        #expect(refused.count == 44)
        #expect(refused.allSatisfy { $0.code == BrokerErrorCode.limitsExceeded }, "\(refused.map { $0.errorName })")
        #expect(refused.first?.message.contains("256 calls in flight") == true)
        print(
            "300 calls in flight on one connection: \(outcomes.count - refused.count) served, \(refused.count) "
                + "refused with LimitsExceeded"
        )

        // The slots came back: the same connection is served again, and so is everyone else.
        _ = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"]))
        #expect(try env.brokerctl(["current-account", "--client-id", "notes-app"]).status == 0)
    }

    /// A silent token that skips the cache; nil when it came, the error otherwise.
    private static func forceRefresh(_ app: PublicClientApplication) async -> BrokerError? {
        do throws(BrokerError) {
            _ = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"], forceRefresh: true))
            return nil
        } catch {
            return error
        }
    }
}
