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

    @Test("brokerctl alone answers the plain reads; for anything else it names the program it misses")
    func withoutTheCommands() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        // A copy of brokerctl where no brokerctl-commands is: the plain reads are its own.
        let directory = try TemporaryDirectory()
        let alone = directory.path + "/brokerctl"
        try copyExecutable(Binaries.path("brokerctl"), to: alone)
        // brokerctl names the directory /proc/self/exe gives, symbolic links resolved.
        let resolved = URL(fileURLWithPath: directory.path).resolvingSymlinksInPath().path
        let address = ["--address", env.bus.address]
        let read = try await runCommand(alone, ["current-account", "--client-id", "mail-app"] + address)
        #expect(read.status == 0 && read.stdout.contains(TestUsers.alice.username), "\(read.stderr)")
        let json = try await runCommand(alone, ["device-info", "--json"] + address)
        #expect(json.status == 0 && (try? json.json()["deviceMode"]) as? String == "shared", "\(json.stdout)")

        for arguments in [["--help"], ["sign-out", "--client-id", "mail-app"] + address, ["device-info", "--jsn"]] {
            let refused = try await runCommand(alone, arguments)
            #expect(refused.status == 127, "\(arguments): \(refused.status)")
            #expect(refused.stderr.contains("brokerctl-commands, which runs every command"), "\(refused.stderr)")
            #expect(refused.stderr.contains(resolved + "/brokerctl-commands"), "\(refused.stderr)")
        }
        // Nothing was signed out by the refused sign-out.
        let after = try env.brokerctl(["current-account", "--client-id", "mail-app"])
        #expect(after.stdout.contains(TestUsers.alice.username), "\(after.stdout)")
    }

    @Test("a brokerctl-commands that another user could have written beside brokerctl is not run")
    func plantedCommands() async throws {
        let directory = try TemporaryDirectory()
        let alone = directory.path + "/brokerctl"
        try copyExecutable(Binaries.path("brokerctl"), to: alone)
        let marker = directory.path + "/ran"
        let planted = try directory.write("brokerctl-commands", "#!/bin/sh\ntouch '\(marker)'\n")
        for mode in [0o777, 0o757] {
            #expect(chmod(planted, mode_t(mode)) == 0)
            let result = try await runCommand(alone, ["sign-out", "--client-id", "mail-app"])
            #expect(result.status == 126, "mode \(String(mode, radix: 8)): \(result.status)")
            #expect(result.stderr.contains("is writable by other users: not run"), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: marker), "mode \(String(mode, radix: 8)) ran it")
        }
        // A symbolic link, even to a file of this user's, is not followed.
        let mine = try directory.write("mine", "#!/bin/sh\ntouch '\(marker)'\n")
        #expect(unlink(planted) == 0 && chmod(mine, 0o755) == 0)
        #expect(symlink(directory.path + "/mine", planted) == 0)
        let linked = try await runCommand(alone, ["sign-out", "--client-id", "mail-app"])
        #expect(linked.status == 126 && linked.stderr.contains("is a symbolic link: not run"), "\(linked.stderr)")
        #expect(!FileManager.default.fileExists(atPath: marker), "the link was followed")
    }

    @Test("a file planted where brokerctl looks first does not stop it from running its own program")
    func plantedInTheFirstPlace() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        // brokerctl and brokerctl-commands side by side in a directory others may write to, where
        // another user made the place brokerctl looks first, ../libexec/shared-device-broker/.
        let prefix = try TemporaryDirectory()
        #expect(chmod(prefix.path, 0o1777) == 0)
        for sub in ["/bin", "/libexec/shared-device-broker"] {
            try FileManager.default.createDirectory(atPath: prefix.path + sub, withIntermediateDirectories: true)
        }
        try copyExecutable(Binaries.path("brokerctl"), to: prefix.path + "/bin/brokerctl")
        try copyExecutable(Binaries.path("brokerctl-commands"), to: prefix.path + "/bin/brokerctl-commands")
        let marker = prefix.path + "/ran"
        let planted = try prefix.write(
            "libexec/shared-device-broker/brokerctl-commands", "#!/bin/sh\ntouch '\(marker)'\n")
        #expect(chmod(planted, 0o777) == 0)
        let result = try await runCommand(
            prefix.path + "/bin/brokerctl",
            ["sign-in-options", "--client-id", "mail-app", "--address", env.bus.address])
        #expect(result.status == 0, "\(result.status) \(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: marker))
    }
}
