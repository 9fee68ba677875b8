import Foundation
import TestSupport
import Testing

/// brokerd gives back what a burst of HTTP work left in its memory once the work is over: libcurl
/// and the libraries only it needed are unloaded, and the pages of code it no longer touches
/// leave its page tables; then everything that needs the provider still works, libcurl loaded
/// again. Real brokerd, brokerctl and idp-sim; the release after 300 ms instead of a minute
/// (`BROKERD_HTTP_IDLE_RELEASE_MS`, read by debug builds only).
@Suite("Memory given back after a burst of work")
struct MemoryReleaseTests {
    static func mapsLibcurl(_ pid: Int32) throws -> Bool {
        try String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8).contains("libcurl")
    }

    @Test("idle after a sign-in: libcurl unloaded and memory given back; refresh, single sign-on and sign-out work")
    func releasedAndBack() async throws {
        let env = try await offThePool {
            try BrokerEnvironment(brokerEnvironment: ["BROKERD_HTTP_IDLE_RELEASE_MS": "300"])
        }
        let pid = env.brokerd.process.pid
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        try await offThePool {
            _ = try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("idle: libcurl unloaded")
            }
        }
        #expect(try !Self.mapsLibcurl(pid), "libcurl is still mapped after the release")

        let refreshed = try env.brokerctl([
            "token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh",
        ])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let other = try env.brokerctl(["token", "--client-id", "notes-app", "--scope", "User.Read"])
        #expect(other.status == 0, "\(other.stderr)")
        try await offThePool {
            _ = try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("idle: libcurl unloaded")
            }
        }
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(signOut.stdout.contains("\"tokensRevoked\" : true"), "\(signOut.stdout)")
    }
}
