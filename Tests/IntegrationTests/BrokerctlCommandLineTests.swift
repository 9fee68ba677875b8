import Foundation
import TestSupport
import Testing

/// brokerctl's grammar (ArgumentParser's, for every command): every spelling of an option gives
/// the same answer, mistakes get ArgumentParser's message and status, the help is for newcomers,
/// and brokerctl is one program that needs nothing beside it. Real brokerd, brokerctl and idp-sim.
@Suite("brokerctl: one program, one grammar")
struct BrokerctlCommandLineTests {
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
        "a mistake gets ArgumentParser's message and status",
        arguments: [
            (["current-account"], "Missing expected argument '--client-id"),
            (["device-info", "--client-id", "mail-app"], "Unknown option '--client-id'"),
            (["accounts", "--client-id", "mail-app", "--jsn"], "Unknown option '--jsn'"),
            (["device-info", "--help"], "USAGE: brokerctl device-info"),
        ])
    func mistakes(arguments: [String], message: String) async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let result = try env.brokerctl(arguments)
        if arguments.contains("--help") {
            #expect(result.status == 0 && result.stdout.contains(message), "\(result.stdout)")
        } else {
            #expect(result.status == 64 && result.stderr.contains(message), "\(result.status) \(result.stderr)")
        }
    }

    @Test("help: every example copies whole at 80 columns, --device-code is offered, signin and signout work")
    func helpForNewcomers() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        for command in [["--help"], ["sign-in", "--help"]] {
            let help = try env.brokerctl(command)
            #expect(help.status == 0, "\(help.stderr)")
            let lines = help.stdout.split(separator: "\n", omittingEmptySubsequences: false)
            // The long example continues with a backslash and an indented line; wrapped by the
            // help's 80 columns instead, it left the rest of the command at the start of a line.
            #expect(
                help.stdout.contains(
                    "  echo \"$PASSWORD\" | brokerctl sign-in --client-id mail-app \\\n"
                        + "      --username alice@contoso.example --password-stdin\n"), "\(help.stdout)")
            for (index, line) in lines.enumerated() where line.hasSuffix("\\") {
                #expect(index + 1 < lines.count && lines[index + 1].hasPrefix("      "), "\(command): \(line)")
            }
            #expect(!lines.contains { $0.hasPrefix("alice@") }, "\(help.stdout)")
            #expect(help.stdout.contains("--device-code"), "\(command)")
        }
        let noUsername = try env.brokerctl(["sign-in", "--client-id", "mail-app"])
        #expect(noUsername.status != 0 && noUsername.stderr.contains("--device-code"), "\(noUsername.stderr)")
        let signin = try env.brokerctl(["signin", "--client-id", "mail-app", "--username", "two words"])
        #expect(signin.stderr.contains("io.shareddevice.Broker1.Error.InvalidUsername"), "\(signin.stderr)")
        let signout = try env.brokerctl(["signout", "--client-id", "mail-app"])
        #expect(signout.stderr.contains("io.shareddevice.Broker1.Error.NoAccount"), "\(signout.stderr)")
    }

    @Test("brokerctl alone, nothing beside it, runs every command; its JSON is as scripts read it")
    func oneProgram() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let directory = try TemporaryDirectory()
        let alone = directory.path + "/brokerctl"
        try copyExecutable(Binaries.path("brokerctl"), to: alone)
        let address = ["--address", env.bus.address]
        // Sorted keys, two spaces, " : ", null for nobody: what scripts and the docs show.
        let nobody = try await runCommand(alone, ["current-account", "--client-id", "mail-app", "--json"] + address)
        #expect(nobody.status == 0, "\(nobody.stderr)")
        #expect(nobody.stdout == "{\n  \"current\" : null,\n  \"previous\" : null\n}", "\(nobody.stdout)")
        let help = try await runCommand(alone, ["--help"])
        #expect(help.status == 0 && help.stdout.contains("USAGE: brokerctl"), "\(help.status) \(help.stderr)")
        let options = try await runCommand(alone, ["sign-in-options", "--client-id", "mail-app"] + address)
        #expect(options.status == 0 && options.stdout.contains("Sign-in flows:"), "\(options.stderr)")
        let signIn = try await runCommand(
            alone,
            ["sign-in", "--client-id", "mail-app", "--username", TestUsers.alice.username, "--password-stdin"]
                + address, stdin: TestUsers.alice.password + "\n")
        #expect(signIn.status == 0, "\(signIn.status) \(signIn.stderr)")
        let read = try await runCommand(alone, ["current-account", "--client-id", "mail-app"] + address)
        #expect(read.status == 0 && read.stdout.contains(TestUsers.alice.username), "\(read.stderr)")
        let signOut = try await runCommand(alone, ["sign-out", "--client-id", "mail-app", "--json"] + address)
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(signOut.stdout.contains("\"signedOut\" : true"), "\(signOut.stdout)")
        // The JSON has URLs' slashes as they are, for a person reading it.
        let info = try await runCommand(alone, ["device-info", "--json"] + address)
        #expect(info.status == 0 && info.stdout.contains("\"authority\" : \"http://"), "\(info.stdout)")
    }
}
