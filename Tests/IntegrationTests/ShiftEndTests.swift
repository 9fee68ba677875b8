import Foundation
import TestSupport
import Testing

/// The shift ends without anybody pressing Sign Out: after a reboot (`signOutAfterReboot`), and
/// the device is cleared for the next person after every sign-out (`clearOnSignOut`), whatever
/// its cause, which `AccountChanged` and the sign-out's result carry. Real brokerd, brokerctl and
/// idp-sim on a private bus; the boot id comes from a file the test writes (`BROKERD_BOOT_ID_FILE`,
/// for tests only: a test cannot reboot the machine).
@Suite("The end of a shift", .serialized)
struct ShiftEndTests {
    private static func config(_ directory: TemporaryDirectory, _ json: String) throws -> String {
        let path = try directory.write("broker.conf", json)
        chmod(path, 0o600)
        return path
    }

    private func current(_ env: BrokerEnvironment, _ client: String = "mail-app") throws -> [String: Any] {
        try env.brokerctl(["current-account", "--client-id", client, "--json"]).json()
    }

    @Test("signOutAfterReboot: a restart of brokerd keeps the sign-in; a new boot ends it before anyone is served")
    func rebootEndsTheShift() async throws {
        let directory = try TemporaryDirectory()
        let boot = try directory.write("boot_id", "11111111-1111-1111-1111-111111111111\n")
        let env = try BrokerEnvironment(
            brokerArguments: ["--config", try Self.config(directory, #"{"signOutAfterReboot": true}"#)],
            brokerEnvironment: ["BROKERD_BOOT_ID_FILE": boot])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(try env.stateFile()["signedInBoot"] as? String == "11111111-1111-1111-1111-111111111111")

        // brokerd alone restarts (an upgrade, a crash): same boot, still signed in.
        try env.restartBroker(extraArguments: [
            "--config", try Self.config(directory, #"{"signOutAfterReboot": true}"#),
        ])
        #expect((try current(env)["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)

        // The device restarts.
        _ = try directory.write("boot_id", "22222222-2222-2222-2222-222222222222\n")
        try env.restartBroker(extraArguments: [
            "--config", try Self.config(directory, #"{"signOutAfterReboot": true}"#),
        ])
        // Standard error is read on its own: the readiness line on standard output may come first.
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("the device restarted since the sign-in")
        }
        let after = try current(env)
        #expect(after["current"] is NSNull, "\(after)")
        #expect((after["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        #expect(try env.stateFile()["signedInBoot"] == nil)
    }

    @Test("without signOutAfterReboot a new boot keeps the sign-in")
    func rebootKeepsTheShiftByDefault() async throws {
        let directory = try TemporaryDirectory()
        let boot = try directory.write("boot_id", "aaaaaaaa\n")
        let env = try BrokerEnvironment(brokerEnvironment: ["BROKERD_BOOT_ID_FILE": boot])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        _ = try directory.write("boot_id", "bbbbbbbb\n")
        try env.restartBroker()
        #expect((try current(env)["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
    }

    @Test("clearOnSignOut: the listed paths go after a sign-out, links are never followed, a failure is reported")
    func theDeviceIsCleared() async throws {
        let directory = try TemporaryDirectory()
        let home = directory.path + "/home"
        let outside = directory.path + "/outside"
        let files = FileManager.default
        for path in [home + "/Downloads/sub", home + "/.config/kiosk-browser/Default", outside + "/dir"] {
            try files.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        for path in [
            home + "/Downloads/report.pdf", home + "/Downloads/sub/notes.txt", outside + "/secret",
            outside + "/dir/kept", home + "/.config/kiosk-browser/Default/Cookies", home + "/stuck/locked",
        ] {
            try files.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            #expect(files.createFile(atPath: path, contents: Data("x".utf8)))
        }
        // Links planted in the home: to a file and a directory outside it, and a linked directory.
        try files.createSymbolicLink(atPath: home + "/Downloads/link", withDestinationPath: outside + "/secret")
        try files.createSymbolicLink(atPath: home + "/Downloads/dirlink", withDestinationPath: outside + "/dir")
        try files.createSymbolicLink(atPath: home + "/linked", withDestinationPath: outside + "/dir")
        // A file nobody may remove, not even root: immutable.
        let immutable = try await runCommand("/usr/bin/chattr", ["+i", home + "/stuck/locked"]).status == 0
        defer {
            let locked = home + "/stuck/locked"
            Task { _ = try? await runCommand("/usr/bin/chattr", ["-i", locked]) }
        }

        let config = try Self.config(
            directory,
            #"{"clearOnSignOut": ["~/Downloads/*", "~/.config/kiosk-browser/Default/Cookies", "~/linked/*", "~/stuck/*"]}"#
        )
        let env = try BrokerEnvironment(
            brokerArguments: ["--config", config], brokerEnvironment: ["HOME": home, "BROWSER": "/bin/true"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let result = try signOut.json()
        #expect(result["cause"] as? String == "app")
        let removed = result["cleanedUp"] as? [String] ?? []
        let failed = result["notCleanedUp"] as? [String] ?? []

        for gone in ["Downloads/report.pdf", "Downloads/sub", "Downloads/link", "Downloads/dirlink"] {
            #expect(
                !files.fileExists(atPath: home + "/" + gone)
                    && (try? files.destinationOfSymbolicLink(
                        atPath: home + "/" + gone)) == nil,
                "\(gone) is still there")
            #expect(removed.contains(home + "/" + gone), "\(removed)")
        }
        #expect(!files.fileExists(atPath: home + "/.config/kiosk-browser/Default/Cookies"))
        // Nothing outside the home was touched, through either link.
        #expect(files.fileExists(atPath: outside + "/secret") && files.fileExists(atPath: outside + "/dir/kept"))
        // The link on the way to `~/linked/*` is reported, and what lies beyond it is never looked at.
        #expect(failed.contains { $0.hasPrefix(home + "/linked (") && $0.contains("symbolic link") }, "\(failed)")
        if immutable {
            #expect(failed.contains { $0.hasPrefix(home + "/stuck/locked") }, "\(failed)")
            #expect(files.fileExists(atPath: home + "/stuck/locked"))
        }
        // The sign-out stands whatever the clean-up could not do.
        #expect(try current(env)["current"] is NSNull)
        _ = try await runCommand("/usr/bin/chattr", ["-i", home + "/stuck/locked"])
    }

    @Test("a clearOnSignOut path outside the home stops the start, naming it")
    func aPathOutsideTheHomeIsRefused() async throws {
        for listed in ["/etc/passwd", "~/../other/*", "~/"] {
            let directory = try TemporaryDirectory()
            let config = try Self.config(directory, "{\"clearOnSignOut\": [\"\(listed)\"]}")
            let env = try BrokerEnvironment()
            // The first one stopped before the second starts: it would otherwise find the state
            // directory still locked, and say that instead.
            _ = try env.brokerd.stop()
            let brokerd = try TokenStorageTests.startBrokerd(env, ["--config", config, "--token-storage", "memory"])
            #expect(try brokerd.waitForExit(timeout: .seconds(10)) != 0)
            #expect(brokerd.stderrText.contains("clearOnSignOut lists \(listed)"), "\(brokerd.stderrText)")
        }
    }

    @Test("AccountChanged says why: brokerctl watch prints the cause of a sign-out")
    func theCauseReachesEveryApp() async throws {
        let env = try BrokerEnvironment()
        let watch = try env.watch()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)
        let line = try watch.waitForLine(timeout: .seconds(10)) { $0.contains("signed-out") }
        #expect(line.contains("signed-out (app)"), "\(line)")
    }
}
