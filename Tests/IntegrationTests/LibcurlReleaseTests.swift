import Foundation
import TestSupport
import Testing

/// brokerd lets libcurl go once its HTTP client has been idle (a minute; 300 ms here through
/// `BROKERD_HTTP_IDLE_RELEASE_MS`, read by debug builds only): libcurl and the libraries only it
/// needed leave the process, and everything that needs the provider still works, libcurl loaded
/// again. Real brokerd, brokerctl and idp-sim.
@Suite("libcurl unloaded when idle")
struct LibcurlReleaseTests {
    static func mapsLibcurl(_ pid: Int32) throws -> Bool {
        try String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8).contains("libcurl")
    }

    /// Waits, at most 10 s, until brokerd no longer maps libcurl. The unload says nothing on its
    /// own (no log line, no signal), so its state is what is waited for, read every 20 ms.
    static func waitUntilUnloaded(_ pid: Int32) async throws -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while clock.now < deadline {
            if try !mapsLibcurl(pid) { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return try !mapsLibcurl(pid)
    }

    @Test("idle after a sign-in: libcurl unloaded; refresh, single sign-on and sign-out work")
    func releasedAndBack() async throws {
        let env = try await offThePool {
            try BrokerEnvironment(brokerEnvironment: ["BROKERD_HTTP_IDLE_RELEASE_MS": "300"])
        }
        let pid = env.brokerd.process.pid
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        #expect(try await Self.waitUntilUnloaded(pid), "libcurl is still mapped 10 s after the sign-in")

        let refreshed = try env.brokerctl([
            "token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh",
        ])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let other = try env.brokerctl(["token", "--client-id", "notes-app", "--scope", "User.Read"])
        #expect(other.status == 0, "\(other.stderr)")
        #expect(try await Self.waitUntilUnloaded(pid), "libcurl is still mapped 10 s after the tokens")
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(signOut.stdout.contains("\"tokensRevoked\" : true"), "\(signOut.stdout)")
    }
}
