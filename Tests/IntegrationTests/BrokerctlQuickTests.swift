import Foundation
import TestSupport
import Testing

/// brokerctl reads its plainest commands (`device-info`, `current-account`, `accounts` with
/// `--client-id`, `--address`, `--json`) without ArgumentParser, for speed: every spelling of them
/// must give what ArgumentParser would, and everything else must still reach ArgumentParser, with
/// its messages and exit status. Real brokerd, brokerctl and idp-sim.
@Suite("brokerctl: the quick reads and the one grammar")
struct BrokerctlQuickTests {
    @Test("both spellings of an option give the same answer; text and JSON as before")
    func spellings() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let separate = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        let inline = try env.brokerctl(["current-account", "--json", "--client-id=mail-app"])
        #expect(separate.status == 0 && inline.status == 0, "\(separate.stderr) \(inline.stderr)")
        #expect(try separate.json()["current"] as? [String: Any] != nil)
        #expect(
            (try separate.json()["current"] as? [String: Any])?["username"] as? String
                == (try inline.json()["current"] as? [String: Any])?["username"] as? String)
        let text = try env.brokerctl(["device-info"])
        #expect(text.status == 0 && text.stdout.hasPrefix("Device mode:"), "\(text.stdout)")
        #expect(text.stdout.split(separator: "\n").count >= 6, "\(text.stdout)")
        let accounts = try env.brokerctl(["accounts", "--client-id", "mail-app"])
        #expect(accounts.stdout.contains(TestUsers.alice.username), "\(accounts.stdout)")
    }

    @Test(
        "what the quick reads do not take reaches ArgumentParser, with its message and status",
        arguments: [
            (["current-account"], "Missing expected argument '--client-id"),
            (["device-info", "--client-id", "mail-app"], "Unknown option '--client-id'"),
            (["accounts", "--client-id", "mail-app", "--jsn"], "Unknown option '--jsn'"),
            (["device-info", "--help"], "USAGE: brokerctl device-info"),
        ])
    func othersReachArgumentParser(arguments: [String], message: String) async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let result = try env.brokerctl(arguments)
        if arguments.contains("--help") {
            #expect(result.status == 0 && result.stdout.contains(message), "\(result.stdout)")
        } else {
            #expect(result.status == 64 && result.stderr.contains(message), "\(result.status) \(result.stderr)")
        }
    }
}
