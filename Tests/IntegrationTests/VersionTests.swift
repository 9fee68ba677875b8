import BrokerAPI
import Foundation
import TestSupport
import Testing

/// One version, from the VERSION file, everywhere it is shown: both programs' --version, the
/// BrokerVersion property, GetDeviceInformation, and the newest release in CHANGELOG.md.
@Suite("One version everywhere")
struct VersionTests {
    static var fileVersion: String {
        get throws {
            try String(contentsOfFile: Repository.root + "/VERSION", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    @Test("VERSION, both programs' --version, BrokerVersion, GetDeviceInformation and CHANGELOG.md agree")
    func versionsAgree() async throws {
        let version = try Self.fileVersion
        #expect(BrokerRelease.version == version)
        for program in ["brokerd", "brokerctl"] {
            let shown = try await runCommand(Binaries.path(program), ["--version"])
            #expect(shown.status == 0)
            #expect(shown.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == version, "\(program)")
        }
        let env = try await offThePool { try BrokerEnvironment() }
        let property = try await runCommand(
            "/usr/bin/busctl",
            [
                "--address=\(env.bus.address)", "get-property", BrokerNames.busName, BrokerNames.objectPath,
                BrokerNames.interface, "BrokerVersion",
            ])
        #expect(property.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "s \"\(version)\"")
        let info = try await offThePool { try env.brokerctl(["device-info", "--json"]) }
        #expect(try info.json()["brokerVersion"] as? String == version)

        let changelog = try String(contentsOfFile: Repository.root + "/CHANGELOG.md", encoding: .utf8)
        let newest = changelog.split(separator: "\n").first { $0.hasPrefix("## [") && !$0.hasPrefix("## [Unreleased]") }
        #expect(newest?.hasPrefix("## [\(version)] - ") == true, "\(newest ?? "no release in CHANGELOG.md")")
    }
}
