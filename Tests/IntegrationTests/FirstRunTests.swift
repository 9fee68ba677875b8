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

    @Test("a broker the bus could not start: brokerctl says where its log is")
    func aStartThatFailed() async throws {
        let directory = try TemporaryDirectory()
        // An activation file whose broker exits at once, as a broker with a broken configuration does.
        let services = directory.path + "/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        _ = try directory.write(
            "services/io.shareddevice.Broker1.service",
            "[D-BUS Service]\nName=io.shareddevice.Broker1\nExec=/bin/sh -c 'exit 64'\n")
        let bus = try await offThePool {
            try PrivateBus(
                configFile: try directory.write("bus.conf", PrivateBus.configuration(serviceDirectory: services)))
        }
        let info = try await offThePool { try runBrokerctl(["device-info"], address: bus.address) }
        #expect(info.status != 0)
        #expect(info.stderr.contains("could not be started"), "\(info.stderr)")
        #expect(info.stderr.contains("journalctl --user -u shared-device-broker"), "\(info.stderr)")
    }
}
