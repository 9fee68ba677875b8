import BrokerAPI
import Foundation
import TestSupport
import Testing

/// The D-Bus contract as callers other than ours see it: introspection, properties, errors for
/// bad input, and the bus name.
@Suite("D-Bus contract of the running brokerd", .serialized)
struct ContractTests {
    /// The members of the `<interface name="NAME">` element, each method, signal and property as
    /// one string, in a fixed order; comments and layout left out.
    static func interface(_ name: String, in xml: String) throws -> [String] {
        var members: [String] = []
        for line in try interfaceLines(name, in: xml) {
            if line.hasPrefix("<method") || line.hasPrefix("<signal") || line.hasPrefix("<property") {
                members.append(line)
            } else if !members.isEmpty, !line.hasPrefix("</interface") {
                members[members.count - 1] += line
            }
        }
        return members.sorted()
    }

    static func interfaceLines(_ name: String, in xml: String) throws -> [String] {
        var text = xml
        while let start = text.range(of: "<!--"),
            let end = text.range(of: "-->", range: start.upperBound..<text.endIndex)
        {
            text.removeSubrange(start.lowerBound..<end.upperBound)
        }
        guard let start = text.range(of: "<interface name=\"\(name)\">"),
            let end = text.range(of: "</interface>", range: start.upperBound..<text.endIndex)
        else { throw ProcessFailure("no \(name) interface in:\n\(xml)") }
        return text[start.lowerBound..<end.upperBound]
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    @Test(
        "the live introspection of each interface is exactly its dbus/*.xml",
        arguments: [
            (BrokerNames.busName, BrokerNames.objectPath, BrokerNames.interface),
            (MicrosoftBroker1Names.busName, MicrosoftBroker1Names.objectPath, MicrosoftBroker1Names.interface),
        ])
    func introspectionMatchesTheContract(busName: String, path: String, interface: String) async throws {
        let env = try await offThePool { try BrokerEnvironment(brokerArguments: ["--compat", "microsoft-broker1"]) }
        let introspection = try await runCommand(
            "/usr/bin/gdbus",
            ["introspect", "--address", env.bus.address, "--dest", busName, "--object-path", path, "--xml"])
        #expect(introspection.status == 0, "\(introspection.stderr)")
        let contractPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../dbus/\(interface).xml").standardized.path
        let contract = try String(contentsOfFile: contractPath, encoding: .utf8)
        #expect(try Self.interface(interface, in: introspection.stdout) == Self.interface(interface, in: contract))
        // The standard interfaces are there too.
        for standard in [
            "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Peer",
        ] {
            #expect(introspection.stdout.contains("<interface name=\"\(standard)\">"))
        }
    }

    @Test("properties: DeviceMode, BrokerVersion, and CurrentAccount following sign-in and sign-out")
    func properties() throws {
        let env = try BrokerEnvironment()
        func property(_ name: String) throws -> String {
            let process = try ChildProcess(
                "busctl", executable: "/usr/bin/busctl",
                arguments: [
                    "--address=\(env.bus.address)", "get-property", "io.shareddevice.Broker1",
                    "/io/shareddevice/Broker1", "io.shareddevice.Broker1", name,
                ])
            try process.waitForExit()
            return process.stdoutText
        }
        #expect(try property("DeviceMode") == "s \"shared\"")
        #expect(try property("BrokerVersion").hasPrefix("s \""))
        #expect(try property("CurrentAccount") == "a{sv} 0")
        try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(try property("CurrentAccount").contains(TestUsers.alice.username))
        let set = try ChildProcess(
            "busctl", executable: "/usr/bin/busctl",
            arguments: [
                "--address=\(env.bus.address)", "set-property", "io.shareddevice.Broker1",
                "/io/shareddevice/Broker1", "io.shareddevice.Broker1", "DeviceMode", "s", "default",
            ])
        #expect(try set.waitForExit() != 0)
        #expect(try property("DeviceMode") == "s \"shared\"")
    }

    @Test("bad input gets an error reply, changes nothing, and the broker stays up")
    func badInput() throws {
        let env = try BrokerEnvironment(brokerArguments: [])
        try env.signIn(TestUsers.alice, client: "mail-app")
        let long = String(repeating: "x", count: 300)
        let cases: [(String, [String], String)] = [
            (Broker1Method.getCurrentAccount.rawValue, ["''"], "InvalidArgument"),
            (Broker1Method.getCurrentAccount.rawValue, ["'\(long)'"], "InvalidArgument"),
            (Broker1Method.getCurrentAccount.rawValue, ["'has space'"], "InvalidArgument"),
            (Broker1Method.signInWithPassword.rawValue, ["'mail-app'", "''", "'pw'", "@as []"], "InvalidUsername"),
            (
                Broker1Method.signInWithPassword.rawValue,
                ["'mail-app'", "'\(TestUsers.bob.username)'", "'\(TestUsers.bob.password)'", "@as []"],
                "AccountAlreadySignedIn"
            ),
            (Broker1Method.signInWithPassword.rawValue, ["'mail-app'", "'x@y'", "''", "@as []"], "InvalidArgument"),
            (
                Broker1Method.acquireTokenSilent.rawValue, ["'mail-app'", "@as []", "'someone-else'", "@a{sv} {}"],
                "NoAccount"
            ),
            (
                Broker1Method.acquireTokenSilent.rawValue, ["'mail-app'", "@as []", "''", "{'forceRefresh': <'yes'>}"],
                "InvalidArgument"
            ),
            (Broker1Method.signOut.rawValue, ["'mail-app'", "'someone-else'", "@a{sv} {}"], "NoAccount"),
            ("NoSuchMethod", [], "org.freedesktop.DBus.Error.UnknownMethod"),
        ]
        for (method, arguments, expected) in cases {
            let result = try env.gdbusCallInterface("\(BrokerNames.interface).\(method)", arguments)
            #expect(result.status != 0, "\(method) \(arguments) succeeded")
            #expect(result.stderr.contains(expected), "\(method) \(arguments): \(result.stderr)")
        }
        // Wrong signatures, sent with dbus-send, which (unlike gdbus) does not coerce to the introspected types.
        let wrongTypes: [(String, [String])] = [
            (Broker1Method.getCurrentAccount.rawValue, ["int32:42"]),
            (Broker1Method.getCurrentAccount.rawValue, ["string:a", "string:b"]),
            (Broker1Method.getCurrentAccount.rawValue, []),
            (Broker1Method.signInWithPassword.rawValue, ["string:mail-app", "string:x", "string:y"]),
            (Broker1Method.signOut.rawValue, ["string:mail-app", "string:", "boolean:true"]),
            (Broker1Method.getAccounts.rawValue, ["array:string:mail-app"]),
        ]
        // `--bus=` registers on the bus; dbus-send's `--address=` means `--peer=` (no Hello), which the daemon refuses.
        for (method, arguments) in wrongTypes {
            let process = try ChildProcess(
                "dbus-send", executable: "/usr/bin/dbus-send",
                arguments: [
                    "--bus=\(env.bus.address)", "--print-reply", "--dest=io.shareddevice.Broker1",
                    "/io/shareddevice/Broker1", "io.shareddevice.Broker1.\(method)",
                ] + arguments)
            #expect(try process.waitForExit() != 0, "\(method) \(arguments) succeeded")
            #expect(
                process.stderrText.contains("org.freedesktop.DBus.Error.InvalidArgs"),
                "\(method): \(process.stderrText)")
        }
        let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        #expect((seen["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        #expect(env.brokerd.process.isRunning)
    }

    @Test("unknown clientIds are refused when the configuration lists the clients")
    func unknownClient() throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.json", #"{"clients": [{"clientId": "mail-app"}]}"#)
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        let result = try env.brokerctl(["current-account", "--client-id", "stranger-app"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("io.shareddevice.Broker1.Error.UnknownClient"))
        // In the log too, as an administrator looks for a misconfigured app there.
        try env.brokerd.process.waitForLine(timeout: .seconds(5), stderr: true) {
            $0.contains("refused a clientId the configuration does not list") && $0.contains("stranger-app")
        }
        #expect(try env.brokerctl(["current-account", "--client-id", "mail-app"]).status == 0)
    }

    @Test("a second brokerd on the same bus says the name is taken and exits non-zero")
    func nameTaken() throws {
        let env = try BrokerEnvironment()
        let second = try ChildProcess(
            "brokerd 2", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", env.bus.address, "--authority", env.idp.authority,
                "--state-dir", env.directory.path + "/state2", "--token-storage", "plaintext-file",
            ])
        #expect(try second.waitForExit(timeout: .seconds(20)) != 0)
        #expect(second.stderrText.contains("already taken"))
    }

    @Test(
        "a second brokerd on another bus with the same state directory refuses to start, naming the first; the first goes on"
    )
    func stateDirectoryTaken() throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let otherBus = try PrivateBus()
        let second = try ChildProcess(
            "brokerd 2", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", otherBus.address, "--authority", env.idp.authority,
                "--state-dir", env.stateDirectory, "--token-storage", "plaintext-file",
            ])
        #expect(try second.waitForExit(timeout: .seconds(20)) != 0)
        #expect(second.stderrText.contains("another brokerd (pid \(env.brokerd.process.pid))"), "\(second.stderrText)")
        #expect(second.stderrText.contains("--state-dir"))
        // Nothing changed for the first: still signed in, still answering.
        let seen = try env.brokerctl(["current-account", "--client-id", "mail-app"])
        #expect(seen.status == 0 && seen.stdout.contains(TestUsers.alice.username))
    }

    @Test("brokerd stops cleanly on SIGTERM and releases its name")
    func cleanStop() throws {
        let env = try BrokerEnvironment()
        #expect(try env.brokerd.stop() == 0)
        let result = try env.brokerctl(["device-info"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("org.freedesktop.DBus.Error.ServiceUnknown"))
    }

    @Test("a bad authority, a misspelt configuration key or an unusable state file gets a clear message")
    func startupErrors() throws {
        let env = try BrokerEnvironment()
        let insecure = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", env.bus.address, "--authority", "http://login.example.com/tenant/v2.0",
                "--state-dir", env.directory.path + "/s3",
            ])
        #expect(try insecure.waitForExit() != 0)
        #expect(insecure.stderrText.contains("HTTPS"))

        let config = try env.directory.write("misspelt.json", #"{"deviceMode": "shared", "tokenStorag": "memory"}"#)
        let misspelt = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", env.bus.address, "--authority", env.idp.authority, "--config", config,
                "--state-dir", env.directory.path + "/s4",
            ])
        #expect(try misspelt.waitForExit() == 1)
        #expect(misspelt.stderrText.contains(#"unknown key "tokenStorag" at the top level"#), "\(misspelt.stderrText)")

        // A corrupt state file is kept aside and the broker starts signed out.
        _ = try env.brokerd.stop()
        try "{not json".write(toFile: env.stateDirectory + "/state.json", atomically: false, encoding: .utf8)
        // A journal beside it (a clean stop folds it in, so one is written here, as a crash would leave it).
        let journal = env.stateDirectory + "/state.journal"
        try #"{"journal":1,"snapshot":"5a"}"#.appending("\n").write(toFile: journal, atomically: false, encoding: .utf8)
        chmod(journal, 0o600)
        try env.restartBroker()
        let kept = try FileManager.default.contentsOfDirectory(atPath: env.stateDirectory).filter {
            $0.contains("broken")
        }
        // Its journal goes aside with it: its lines belong to that file.
        #expect(kept.filter { $0.hasPrefix("state.json.broken-") }.count == 1, "\(kept)")
        #expect(kept.filter { $0.hasPrefix("state.journal.broken-") }.count == 1, "\(kept)")
        let seen = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        #expect(seen["current"] is NSNull)
    }
}
