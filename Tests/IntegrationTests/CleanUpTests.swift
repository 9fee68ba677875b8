import Foundation
import TestSupport
import Testing

/// The administrator's clean-up list (`clearOnSignOut`) from the side of the person at the
/// kiosk, who has the desktop user's uid between two sign-ins: hidden-entry patterns that glob(3)
/// would expand to `.` and `..`, a second home beside the kiosk's, links at every step, a listed
/// directory swapped for a link to elsewhere while the clean-up runs, brokerd killed right after
/// the sign-out, the next person signing in at once, a folder of 20,000 files. Nothing outside
/// what is listed may ever go, and the last person's files never stay for the next one. Real
/// brokerd, brokerctl and idp-sim on a private bus; the swap is a child doing renameat2.
@Suite("The clean-up after a sign-out, from the person's side", .serialized)
struct CleanUpTests {
    private static let files = FileManager.default

    /// A kiosk's home, another home beside it and a folder elsewhere, in a directory of their own.
    struct Tree {
        let root: TemporaryDirectory
        var home: String { root.path + "/home" }
        var otherHome: String { root.path + "/other-home" }
        var outside: String { root.path + "/outside" }

        init() throws { root = try TemporaryDirectory() }

        /// Creates each file (with its directories) under `base`.
        func make(_ paths: [String], under base: String) throws {
            for path in paths {
                let full = base + "/" + path
                try files.createDirectory(
                    atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                #expect(files.createFile(atPath: full, contents: Data("x".utf8)), "\(full)")
            }
        }

        /// `count` empty files `prefix0`, `prefix1`, ... in `directory`, made quickly.
        func makeMany(_ count: Int, in directory: String, prefix: String = "f") throws {
            try files.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for index in 0..<count {
                let fd = open(directory + "/\(prefix)\(index)", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                guard fd >= 0 else { throw ProcessFailure("cannot create a file in \(directory): errno \(errno)") }
                close(fd)
            }
        }

        func link(_ path: String, to target: String) throws {
            try files.createDirectory(atPath: home, withIntermediateDirectories: true)
            try files.createSymbolicLink(atPath: home + "/" + path, withDestinationPath: target)
        }

        func exists(_ path: String) -> Bool {
            var info = stat()
            return lstat(path, &info) == 0
        }

        func count(_ directory: String) -> Int { (try? files.contentsOfDirectory(atPath: directory).count) ?? -1 }

        /// A broker whose home is this tree's `home` and whose clean-up list is `listed`.
        func broker(listing listed: [String], brokerArguments: [String] = []) throws -> (BrokerEnvironment, [String]) {
            let arguments = ["--config", try configuration(listed)] + brokerArguments
            let env = try BrokerEnvironment(
                brokerArguments: arguments, brokerEnvironment: ["HOME": home, "BROWSER": "/bin/true"])
            return (env, arguments)
        }

        func configuration(_ listed: [String]) throws -> String {
            let json = try JSONSerialization.data(withJSONObject: ["clearOnSignOut": listed])
            let path = try root.write("broker.conf", String(decoding: json, as: UTF8.self))
            chmod(path, 0o600)
            return path
        }
    }

    private static func signOut(_ env: BrokerEnvironment) throws -> (result: [String: Any], bytes: Int) {
        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"], timeout: .seconds(60))
        #expect(signOut.status == 0, "\(signOut.stderr)")
        return (try signOut.json(), signOut.stdout.utf8.count)
    }

    @Test("'.*' patterns never match . or ..: the home, a home beside it and files elsewhere stay; links at each step")
    func dotEntriesNeverMatch() async throws {
        let tree = try Tree()
        try tree.make(
            [
                "Documents/notes.txt", ".ssh/id_ed25519", ".cache/thumbs/a.png", ".local/share/recent",
                "Downloads/report.pdf", "Downloads/.partial", "Downloads/sub/notes.txt",
            ], under: tree.home)
        try tree.make(["Documents/theirs.txt", ".ssh/id_ed25519"], under: tree.otherHome)
        try tree.make(["secret", "dir/kept", "profile/Cookies"], under: tree.outside)
        // A link at every step: as a match, inside a removed directory, on the way to a match
        // (named and matched by a pattern).
        try tree.link("Downloads/link", to: tree.outside + "/secret")
        try tree.link("Downloads/dirlink", to: tree.outside + "/dir")
        try tree.link("Downloads/sub/deeplink", to: tree.outside + "/dir")
        try tree.link("linked", to: tree.outside + "/dir")
        try tree.link("profile", to: tree.outside + "/profile")

        // brokerd's state where it is by default, under the home: `~/.*` reaches it.
        let stateDirectory = tree.home + "/.local/state/shared-device-broker"
        let (env, _) = try tree.broker(
            listing: ["~/Downloads/*", "~/Downloads/.*", "~/linked/*", "~/*/Cookies", "~/.*"],
            brokerArguments: ["--state-dir", stateDirectory])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let (result, _) = try Self.signOut(env)
        let removed = result["cleanedUp"] as? [String] ?? []
        let failed = result["notCleanedUp"] as? [String] ?? []

        // What was listed went; the links themselves, never what they lead to.
        for gone in [
            "Downloads/report.pdf", "Downloads/.partial", "Downloads/sub", "Downloads/link", "Downloads/dirlink",
            ".ssh", ".cache",
        ] {
            #expect(!tree.exists(tree.home + "/" + gone), "\(gone) is still there")
            #expect(removed.contains(tree.home + "/" + gone), "\(removed)")
        }
        // `.` and `..` matched nothing: Downloads, the home and what is beside them stay.
        #expect(tree.exists(tree.home + "/Downloads") && tree.count(tree.home + "/Downloads") == 0)
        #expect(tree.exists(tree.home + "/Documents/notes.txt"), "the home was emptied")
        #expect(
            tree.exists(tree.otherHome + "/Documents/theirs.txt") && tree.exists(tree.otherHome + "/.ssh/id_ed25519"))
        for kept in ["secret", "dir/kept", "profile/Cookies"] {
            #expect(tree.exists(tree.outside + "/" + kept), "\(kept) outside the home was removed")
        }
        #expect(!(removed + failed).contains { $0.contains("/.. ") || $0.hasSuffix("/..") || $0.hasSuffix("/.") })
        // A link on the way to a match is reported, and not followed.
        for link in ["linked", "profile"] {
            #expect(
                failed.contains { $0.hasPrefix(tree.home + "/\(link) (") && $0.contains("symbolic link") }, "\(failed)")
        }
        // brokerd's own state stays, and with it the broker; what is beside it goes.
        #expect(!tree.exists(tree.home + "/.local/share"))
        #expect(tree.exists(stateDirectory + "/state.json"))
        #expect(
            failed.contains { $0.hasPrefix(stateDirectory + " (") && $0.contains("state directory: kept") }, "\(failed)"
        )
        #expect(try env.brokerctl(["current-account", "--client-id", "mail-app"]).status == 0)
        #expect(result["cleanedUpCount"] as? Int == removed.count, "\(result)")
        #expect(result["notCleanedUpCount"] as? Int == failed.count, "\(result)")
    }

    @Test("a listed directory swapped with a link to outside the home during the clean-up: nothing outside goes")
    func swappedDirectory() async throws {
        let tree = try Tree()
        let names = 300
        // The same names inside and outside: a clean-up that resolves a path again after a check
        // removes the file outside whenever the swap falls in between.
        try tree.makeMany(names, in: tree.outside)
        try tree.makeMany(names, in: tree.outside + "/nested")
        try tree.link("swap", to: tree.outside)
        let (env, _) = try tree.broker(listing: ["~/Downloads/*"])
        let python = "/usr/bin/python3"
        let script = Repository.root + "/Tests/Hostile/swap_directory.py"
        var exchanges: [String] = []
        for round in 1...4 {
            try tree.makeMany(names, in: tree.home + "/Downloads")
            try tree.makeMany(names, in: tree.home + "/Downloads/nested")
            #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
            let swapper = try ChildProcess(
                "swapper", executable: python, arguments: [script, tree.home + "/Downloads", tree.home + "/swap"])
            try swapper.waitForLine(timeout: .seconds(10)) { $0 == "swapping" }
            let (result, _) = try Self.signOut(env)
            swapper.signal(SIGTERM)
            #expect(try swapper.waitForExit(timeout: .seconds(10)) == 0, "\(swapper.stderrText)")
            exchanges.append(swapper.stdoutText.split(separator: "\n").last.map(String.init) ?? "")
            #expect(tree.count(tree.outside) == names + 1, "round \(round): files outside the home were removed")
            #expect(tree.count(tree.outside + "/nested") == names, "round \(round): a directory outside was entered")
            #expect(
                (result["cleanedUp"] as? [String] ?? []).allSatisfy { $0.hasPrefix(tree.home + "/Downloads/") },
                "\(result)")
            // Whatever the swap let it reach this time, the rest goes at the next sign-out.
            for left in try Self.files.contentsOfDirectory(atPath: tree.home + "/Downloads") {
                try Self.files.removeItem(atPath: tree.home + "/Downloads/" + left)
            }
        }
        print("swapped during the clean-ups: \(exchanges)")
    }

    @Test("brokerd SIGKILLed after the sign-out's AccountChanged while revocation is slow: the restart clears")
    func killedAfterTheSignOut() async throws {
        let tree = try Tree()
        try tree.make(["Downloads/alice-payslip.pdf"], under: tree.home)
        try tree.makeMany(5_000, in: tree.home + "/Downloads/cache")
        let (env, arguments) = try tree.broker(listing: ["~/Downloads/*"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        // The provider holds every revocation for a minute: brokerd is killed long before.
        try await env.setProviderFault("slow", count: 8, delayMs: 60_000, endpoint: "revoke")
        let watch = try env.watch()
        let signOut = try env.startBrokerctl(["sign-out", "--client-id", "calendar-app"])
        _ = try watch.waitForLine(timeout: .seconds(10)) { $0.contains("signed-out") }
        env.brokerd.process.signal(SIGKILL)
        _ = try signOut.waitForExit(timeout: .seconds(10))
        let owedAtKill = try env.stateFile()["cleanUpOwed"] as? Bool ?? false

        try await env.setProviderFault("none", endpoint: "revoke")
        // Ready means served: the clean-up a killed run owed is done before.
        try env.restartBroker(extraArguments: arguments)
        #expect(!tree.exists(tree.home + "/Downloads/alice-payslip.pdf"), "the next person finds alice's file")
        #expect(tree.count(tree.home + "/Downloads") == 0)
        #expect(
            try env.stateFile()["cleanUpOwed"] == nil, "still owed after the restart (owed at the kill: \(owedAtKill))")
        #expect(try env.stateFile()["current"] == nil)
    }

    @Test("the next person signs in at once: the clean-up is over before, and never meets their files")
    func nextPersonAfterTheCleanUp() async throws {
        let tree = try Tree()
        try tree.makeMany(20_000, in: tree.home + "/Downloads", prefix: "alice-")
        let (env, _) = try tree.broker(listing: ["~/Downloads/*"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        // Revocations take 5 s each: the sign-out's follow-ups outlast bob's sign-in.
        try await env.setProviderFault("slow", count: 8, delayMs: 5_000, endpoint: "revoke")
        let watch = try env.watch()
        let signOut = try env.startBrokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        _ = try watch.waitForLine(timeout: .seconds(10)) { $0.contains("signed-out") }
        #expect(try env.signIn(TestUsers.bob, client: "notes-app").status == 0)
        #expect(tree.count(tree.home + "/Downloads") == 0, "bob was signed in before alice's files were cleared")
        // Bob downloads a file while alice's sign-out is still at the provider.
        try tree.make(["Downloads/bob-ticket.pdf"], under: tree.home)
        #expect(signOut.isRunning, "the revocations were meant to outlast bob's sign-in")
        #expect(try signOut.waitForExit(timeout: .seconds(60)) == 0, "\(signOut.stderrText)")
        #expect(tree.exists(tree.home + "/Downloads/bob-ticket.pdf"), "alice's clean-up removed bob's file")
    }

    @Test("20,000 files cleared: the reply holds counts and at most 20 paths of each kind")
    func largeFolder() async throws {
        let tree = try Tree()
        try tree.makeMany(20_000, in: tree.home + "/Downloads")
        let (env, _) = try tree.broker(listing: ["~/Downloads/*"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let started = ContinuousClock.now
        let (result, bytes) = try Self.signOut(env)
        let took = ContinuousClock.now - started
        #expect(tree.count(tree.home + "/Downloads") == 0)
        #expect(result["cleanedUpCount"] as? Int == 20_000, "\(result["cleanedUpCount"] ?? "none")")
        #expect((result["cleanedUp"] as? [String])?.count == 20, "\((result["cleanedUp"] as? [String])?.count ?? -1)")
        #expect(result["notCleanedUpCount"] as? Int == 0)
        #expect(bytes < 8_000, "the reply is \(bytes) bytes")
        print("20,000 files cleared in a sign-out of \(took); its result \(bytes) bytes")
        // brokerd is still on the bus.
        #expect(try env.brokerctl(["current-account", "--client-id", "mail-app"]).status == 0)
    }
}
