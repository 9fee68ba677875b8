import Foundation
import TestSupport
import Testing

/// brokerd started by systemd logs for the journal: when `JOURNAL_STREAM` names its standard
/// error, each line carries its syslog priority (`<4>` for a warning) and no timestamp of its own.
@Suite("Logging for the systemd journal")
struct JournalLoggingTests {
    @Test("with JOURNAL_STREAM naming standard error: <N> priority prefixes, no timestamps; without it: plain lines")
    func priorityPrefixes() throws {
        let env = try BrokerEnvironment()
        // The usual lines, from the environment's brokerd: a timestamp first, no prefix.
        #expect(env.brokerd.process.stderrLines.allSatisfy { !$0.hasPrefix("<") })
        _ = try env.brokerd.stop()

        // As systemd does for a unit: JOURNAL_STREAM is the device and inode of standard error.
        let script = #"JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$@""#
        let brokerd = try ChildProcess(
            "brokerd", executable: "/bin/sh",
            arguments: [
                "-c", script, "sh", Binaries.path("brokerd"), "--address", env.bus.address,
                "--authority", env.idp.authority, "--state-dir", env.stateDirectory, "--token-storage", "memory",
            ])
        try brokerd.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("brokerd ready:") }
        let warning = try brokerd.waitForLine(timeout: .seconds(5), stderr: true) {
            $0.contains("tokens are kept in memory only")
        }
        #expect(warning.hasPrefix("<4>brokerd: "), "\(warning)")
        let lines = brokerd.stderrLines
        #expect(!lines.isEmpty)
        for line in lines {
            #expect(line.range(of: #"^<[2-7]>[A-Za-z]+: "#, options: .regularExpression) != nil, "\(line)")
            #expect(line.range(of: #"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}"#, options: .regularExpression) == nil, "\(line)")
        }
        brokerd.signal(SIGTERM)
        #expect(try brokerd.waitForExit(timeout: .seconds(10)) == 0)
    }
}
