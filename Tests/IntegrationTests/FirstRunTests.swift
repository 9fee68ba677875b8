import BrokerAPI
import Foundation
import TestSupport
import Testing

/// A broker started before anyone configured a provider (a fresh install, activated by the first
/// app that asks) answers what it can, and says what to configure where, instead of exiting with
/// a status the app sees only as "exited with status 64".
@Suite("First run, no provider configured")
struct FirstRunTests {
    @Test("no authority: device mode and device information are served; sign-ins and tokens say which file")
    func noAuthority() async throws {
        let directory = try TemporaryDirectory()
        let bus = try await offThePool { try PrivateBus() }
        let brokerd = try await offThePool {
            let process = try ChildProcess(
                "brokerd", executable: Binaries.path("brokerd"),
                arguments: [
                    "--address", bus.address, "--device-mode", "shared", "--state-dir", directory.path + "/state",
                    "--token-storage", "plaintext-file",
                ])
            try process.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("brokerd ready:") }
            return process
        }
        defer { brokerd.kill() }
        @Sendable func brokerctl(_ arguments: [String], stdin: String? = nil) throws -> CommandResult {
            try runBrokerctl(arguments, address: bus.address, stdin: stdin)
        }
        let file = "/etc/shared-device-broker/broker.conf"

        let info = try await offThePool { try brokerctl(["device-info"]) }
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stdout.contains("shared") && info.stdout.contains(file), "\(info.stdout)")

        let signIn = try await offThePool {
            try brokerctl(
                ["sign-in", "--client-id", "mail-app", "--username", "alice@contoso.example", "--password-stdin"],
                stdin: "secret\n")
        }
        #expect(signIn.status == 1)
        #expect(signIn.stderr.contains("io.shareddevice.Broker1.Error.NotConfigured"), "\(signIn.stderr)")
        #expect(signIn.stderr.contains(file) && signIn.stderr.contains("authority"), "\(signIn.stderr)")

        let token = try await offThePool { try brokerctl(["token", "--client-id", "mail-app"]) }
        #expect(token.stderr.contains("io.shareddevice.Broker1.Error.NotConfigured"), "\(token.stderr)")
        let options = try await offThePool { try brokerctl(["sign-in-options", "--client-id", "mail-app"]) }
        #expect(options.stderr.contains("io.shareddevice.Broker1.Error.NotConfigured"), "\(options.stderr)")
        // Queries that need no provider still answer.
        #expect(try await offThePool { try brokerctl(["current-account", "--client-id", "mail-app"]) }.status == 0)
    }

    @Test("the device id is made and kept at the first start, before anything else is written")
    func deviceIdKeptFromTheFirstStart() async throws {
        let directory = try TemporaryDirectory()
        let bus = try await offThePool { try PrivateBus() }
        var ids: [String] = []
        for _ in 0..<2 {
            let brokerd = try await offThePool {
                let process = try ChildProcess(
                    "brokerd", executable: Binaries.path("brokerd"),
                    arguments: [
                        "--address", bus.address, "--state-dir", directory.path + "/state", "--token-storage", "memory",
                    ])
                try process.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("brokerd ready:") }
                return process
            }
            let info = try await offThePool { try runBrokerctl(["device-info", "--json"], address: bus.address) }
            ids.append(try info.json()["deviceId"] as? String ?? "")
            brokerd.signal(SIGTERM)
            _ = try await offThePool { try brokerd.waitForExit(timeout: .seconds(10)) }
        }
        #expect(!ids[0].isEmpty && ids[0] == ids[1], "\(ids)")
    }

    /// Every way brokerd's start can fail, as an administrator meets it: started by the bus (no
    /// systemd, so its standard error reaches nobody), the app hears the bus's `Spawn.ChildExited`;
    /// brokerctl (the client library) must say brokerd's own words, read back from the file the
    /// docs name, and the exit status must be one brokerd(8) lists for that case.
    @Test(
        "a broker the bus could not start: brokerctl says brokerd's own words, from the file brokerd(8) names",
        arguments: [
            StartFailureCase(
                name: "a misspelt configuration key", config: #"{"tokenStorag": "memory"}"#, flags: [], status: 1,
                says: #"unknown key "tokenStorag" at the top level"#),
            StartFailureCase(
                name: "a device mode brokerd does not know", config: nil, flags: ["--device-mode", "kiosk"],
                status: 64, says: "kiosk"),
            StartFailureCase(
                name: "a configuration file others can write", config: #"{"deviceMode": "shared"}"#, flags: [],
                status: 1, says: "fix it with: chmod go-w", configMode: 0o666),
        ])
    func aStartThatFailed(_ failure: StartFailureCase) async throws {
        let directory = try TemporaryDirectory()
        let stateHome = directory.path + "/state-home"
        var arguments = ["--state-dir", directory.path + "/state", "--token-storage", "memory"] + failure.flags
        if let config = failure.config {
            let path = try directory.write("broker.conf", config)
            chmod(path, failure.configMode)
            arguments += ["--config", path]
        }
        let command = arguments
        // Run by hand first: the exit status, against the manual.
        let direct = try await offThePool {
            try CommandProcess(
                "brokerd", executable: Binaries.path("brokerd"), arguments: command,
                environment: ["XDG_STATE_HOME": stateHome]
            ).waitForExit(timeout: .seconds(20))
        }
        #expect(direct.status == failure.status, "\(failure.name): \(direct.stderr)")
        #expect(Self.documentedExitStatuses().contains(direct.status), "exit \(direct.status) is not in brokerd(8)")
        try? FileManager.default.removeItem(atPath: stateHome)

        // Then as the bus starts it.
        let info = try await Self.deviceInfo(
            activating: Binaries.path("brokerd") + " " + arguments.joined(separator: " "), in: directory,
            stateHome: stateHome)
        #expect(info.status != 0)
        #expect(info.stderr.contains("could not be started"), "\(info.stderr)")
        #expect(info.stderr.contains(failure.says), "\(failure.name): \(info.stderr)")
        #expect(info.stderr.contains(stateHome + "/shared-device-broker/brokerd-start-failure.log"), "\(info.stderr)")
    }

    @Test("a start that succeeds removes the last failure; with none recorded, brokerctl names the journal")
    func aStartThatSucceededForgetsTheFailure() async throws {
        let directory = try TemporaryDirectory()
        let stateHome = directory.path + "/state-home"
        let recorded = stateHome + "/shared-device-broker/brokerd-start-failure.log"
        let failed = try await offThePool {
            try CommandProcess(
                "brokerd", executable: Binaries.path("brokerd"), arguments: ["--device-mode", "kiosk"],
                environment: ["XDG_STATE_HOME": stateHome]
            ).waitForExit(timeout: .seconds(20))
        }
        #expect(failed.status == 64)
        #expect(FileManager.default.fileExists(atPath: recorded))
        let env = try await offThePool {
            try BrokerEnvironment(brokerEnvironment: ["XDG_STATE_HOME": stateHome])
        }
        #expect(!FileManager.default.fileExists(atPath: recorded), "the failure outlived a start that succeeded")
        withExtendedLifetime(env) {}

        // Nothing recorded (a broker under systemd writes to the journal): brokerctl says where to look.
        let info = try await Self.deviceInfo(activating: "/bin/sh -c 'exit 1'", in: directory, stateHome: stateHome)
        #expect(info.stderr.contains("journalctl --user -u shared-device-broker"), "\(info.stderr)")
    }

    @Test("a wrong authority (the provider's root, not its issuer) is named at start, in device-info and by sign-ins")
    func aWrongAuthority() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        // idp-sim says its issuer on standard output, beside where it listens.
        try await offThePool {
            _ = try env.idp.process.waitForLine(timeout: .seconds(5)) { $0 == "authority \(env.idp.authority)" }
        }
        // The administrator gave the provider's root URL: brokerd starts, and says so at once.
        try await offThePool { try env.restartBroker(extraArguments: ["--authority", env.idp.baseURL]) }
        let warned = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(15), stderr: true) {
                $0.contains("discovery document could not be read")
            }
        }
        #expect(warned.contains("is the authority the provider's issuer?"), "\(warned)")
        let info = try await offThePool { try env.brokerctl(["device-info", "--json"]) }
        let facts = try info.json()["extraDeviceInformation"] as? [String: Any]
        let discoveryError = facts?[DeviceFact.discoveryError] as? String
        #expect(
            discoveryError?.contains("answered HTTP 404: is the authority the provider's issuer?") == true, "\(info)")
        // In text, single sign-on is unknown because discovery failed, not because nothing was tried.
        let text = try await offThePool { try env.brokerctl(["device-info"]) }
        let line = text.stdout.split(separator: "\n").first { $0.hasPrefix("Single sign-on") } ?? ""
        #expect(line.contains("discovery failed") && line.contains("404"), "\(text.stdout)")
        #expect(!text.stdout.contains("has not reached"), "\(text.stdout)")

        // Each call names the mistake, never a provider to wait for nor a flow it lacks.
        let options = try await offThePool { try env.brokerctl(["sign-in-options", "--client-id", "mail-app"]) }
        #expect(options.stderr.contains("io.shareddevice.Broker1.Error.NotConfigured"), "\(options.stderr)")
        #expect(options.stderr.contains("is the authority the provider's issuer?"), "\(options.stderr)")
        let password = try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }
        #expect(password.stderr.contains("io.shareddevice.Broker1.Error.NotConfigured"), "\(password.stderr)")
        #expect(!password.stderr.contains("NotSupported"), "\(password.stderr)")

        // Fixed: the error leaves the device information once a read succeeds.
        try await offThePool { try env.restartBroker() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let fixed = try await offThePool { try env.brokerctl(["device-info", "--json"]) }
        let fixedFacts = try fixed.json()["extraDeviceInformation"] as? [String: Any]
        #expect(fixedFacts != nil && fixedFacts?[DeviceFact.discoveryError] == nil, "\(fixed.stdout)")
    }

    @Test("the start names every configuration file read, in the order their settings win")
    func theStartNamesItsFiles() async throws {
        let directory = try TemporaryDirectory()
        let user = try directory.write("user.conf", #"{"browserSignOut": "when-asked"}"#)
        let admin = try directory.write("admin.conf", #"{"deviceMode": "shared"}"#)
        chmod(user, 0o600)
        chmod(admin, 0o644)
        let env = try await offThePool {
            try BrokerEnvironment(brokerArguments: ["--config", user, "--admin-config", admin])
        }
        let log = env.brokerd.process.stderrText
        let line = try #require(log.split(separator: "\n").first { $0.hasSuffix("] configuration") }, "\(log)")
        #expect(line.contains("administrator=\(admin)") && line.contains("user=\(user)"), "\(line)")
        #expect(line.contains("the administrator's file, then the command line, then the user's file"), "\(line)")
    }

    /// A setting brokerd cannot use is named where it was set: an administrator told of a flag they
    /// never typed looks for it in the wrong place. Each is refused before brokerd goes near a bus.
    @Test(
        "a setting brokerd refuses is named where it was set: the administrator's file, the user's, or a path given",
        arguments: [
            (
                #"{"authority": "http://login.example/tenant/v2.0"}"#, nil, [String](),
                "authority in ADMIN (http://login.example/tenant/v2.0): http://login.example/tenant/v2.0 uses plain "
                    + "HTTP"
            ),
            (
                nil, #"{"authority": "http://login.example/tenant/v2.0"}"#, [],
                "authority in USER (http://login.example/tenant/v2.0): "
            ),
            (nil, nil, ["--authority", "http://login.example/t"], "--authority (http://login.example/t): "),
            (
                nil, #"{"idleWarningSeconds": 60}"#, [],
                "idleWarningSeconds is 60 but idleSignOutSeconds is not set, so there is no sign-out after inactivity"
            ),
            (
                #"{"idleSignOutSeconds": 30}"#, #"{"idleWarningSeconds": 60}"#, [],
                "idleWarningSeconds is 60, not less than idleSignOutSeconds (30)"
            ),
            (nil, nil, ["--admin-config", "MISSING"], "--admin-config MISSING: no such file"),
            (#"{"deviceMode": "kiosk"}"#, nil, [], #"ADMIN: deviceMode is "kiosk"; it takes "shared" or "default""#),
        ] as [(String?, String?, [String], String)])
    func refusedWhereSet(_ administrator: String?, _ user: String?, _ flags: [String], _ says: String) async throws {
        let directory = try TemporaryDirectory()
        let admin = directory.path + "/admin.conf"
        let userFile = directory.path + "/user.conf"
        let missing = directory.path + "/brokre.conf"
        var arguments = [
            // A bus that is not there: a start that went on would fail there, saying something else.
            "--address", "unix:path=\(directory.path)/no-bus", "--state-dir", directory.path + "/state",
            "--token-storage", "memory",
        ]
        if let administrator {
            _ = try directory.write("admin.conf", administrator)
            arguments += ["--admin-config", admin]
        }
        if let user {
            _ = try directory.write("user.conf", user)
            arguments += ["--config", userFile]
        }
        arguments += flags.map { $0 == "MISSING" ? missing : $0 }
        let command = arguments
        let result = try await offThePool {
            try CommandProcess("brokerd", executable: Binaries.path("brokerd"), arguments: command)
                .waitForExit(timeout: .seconds(20))
        }
        let expected = says.replacingOccurrences(of: "ADMIN", with: admin).replacingOccurrences(
            of: "USER", with: userFile
        ).replacingOccurrences(of: "MISSING", with: missing)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains(expected), "\(result.stderr)")
    }

    /// `brokerctl device-info` on a private bus that starts `exec` for the broker's name, both with
    /// `XDG_STATE_HOME` at `stateHome`.
    static func deviceInfo(activating exec: String, in directory: TemporaryDirectory, stateHome: String) async throws
        -> CommandResult
    {
        let services = directory.path + "/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        _ = try directory.write(
            "services/io.shareddevice.Broker1.service",
            "[D-BUS Service]\nName=io.shareddevice.Broker1\nExec=\(exec)\n")
        let bus = try await offThePool {
            try PrivateBus(
                configFile: try directory.write("bus.conf", PrivateBus.configuration(serviceDirectory: services)),
                environment: ["XDG_STATE_HOME": stateHome])
        }
        return try await offThePool {
            try CommandProcess(
                "brokerctl", executable: Binaries.path("brokerctl"),
                arguments: ["device-info", "--address", bus.address],
                environment: ["XDG_STATE_HOME": stateHome]
            ).waitForExit(timeout: .seconds(20))
        }
    }

    /// The exit statuses brokerd(8) lists (`*N*` items under EXIT STATUS).
    static func documentedExitStatuses() -> Set<Int32> {
        let page = (try? String(contentsOfFile: Repository.root + "/man/brokerd.8.scd", encoding: .utf8)) ?? ""
        guard let section = page.components(separatedBy: "# EXIT STATUS").dropFirst().first else { return [] }
        let body = section.components(separatedBy: "\n# ").first ?? ""
        return Set(
            body.split(separator: "\n").compactMap { line -> Int32? in
                guard line.hasPrefix("*"), line.hasSuffix("*") else { return nil }
                return Int32(line.dropFirst().dropLast())
            })
    }
}

/// One way a start fails: the configuration and flags that cause it, the status brokerd(8)
/// gives for it, and words of brokerd's message.
struct StartFailureCase: Sendable, CustomTestStringConvertible {
    var name: String
    var config: String?
    var flags: [String]
    var status: Int32
    var says: String
    var configMode: mode_t = 0o600
    var testDescription: String { name }
}
