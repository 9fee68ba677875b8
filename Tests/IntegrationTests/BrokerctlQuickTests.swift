import Foundation
import TestSupport
import Testing

/// brokerctl reads its plainest commands (`device-info`, `current-account`, `accounts` with
/// `--client-id`, `--address`, `--json`) without ArgumentParser, for speed: every spelling of them
/// must give what ArgumentParser would, and everything else must still reach ArgumentParser (in
/// brokerctl-commands, which brokerctl execs), with its messages and exit status. Real brokerd,
/// brokerctl, brokerctl-commands and idp-sim.
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

    @Test("brokerctl alone answers the plain reads; for anything else it names the program it misses")
    func withoutTheCommands() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        // A copy of brokerctl where no brokerctl-commands is: the plain reads are its own.
        let directory = try TemporaryDirectory()
        let alone = directory.path + "/brokerctl"
        try FileManager.default.copyItem(atPath: Binaries.path("brokerctl"), toPath: alone)
        let address = ["--address", env.bus.address]
        let read = try await runCommand(alone, ["current-account", "--client-id", "mail-app"] + address)
        #expect(read.status == 0 && read.stdout.contains(TestUsers.alice.username), "\(read.stderr)")
        let json = try await runCommand(alone, ["device-info", "--json"] + address)
        #expect(json.status == 0 && (try? json.json()["deviceMode"]) as? String == "shared", "\(json.stdout)")

        for arguments in [["--help"], ["sign-out", "--client-id", "mail-app"] + address, ["device-info", "--jsn"]] {
            let refused = try await runCommand(alone, arguments)
            #expect(refused.status == 1, "\(arguments): \(refused.status)")
            #expect(refused.stderr.contains("brokerctl-commands is missing"), "\(arguments): \(refused.stderr)")
            #expect(refused.stderr.contains(directory.path + "/brokerctl-commands"), "\(refused.stderr)")
        }
        // Nothing was signed out by the refused sign-out.
        let after = try env.brokerctl(["current-account", "--client-id", "mail-app"])
        #expect(after.stdout.contains(TestUsers.alice.username), "\(after.stdout)")
    }
}
