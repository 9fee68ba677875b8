import Foundation
import TestSupport
import Testing

/// What an administrator and a distribution get from `make`: the manual pages, shell completions
/// generated from the programs, and `make install` and `make uninstall` under DESTDIR, which
/// leaves nothing behind.
@Suite("Installing and removing", .serialized)
struct PackagingTests {
    @Test("make install DESTDIR=... puts pages, completions and data in place; make uninstall removes every file")
    func installThenUninstall() async throws {
        let directory = try TemporaryDirectory()
        let stage = directory.path + "/stage"
        let common = ["DESTDIR=\(stage)", "PREFIX=/usr", "INSTALL_BIN=\(Binaries.directory)"]
        for target in ["man", "completions", "install", "install-microsoft-broker1"] {
            let make = try await offThePool { try runMake([target] + common) }
            try #require(make.status == 0, "make \(target): \(make.stdout)\n\(make.stderr)")
        }
        let installed = try Self.files(under: stage)
        for expected in [
            "/usr/bin/brokerd", "/usr/bin/brokerctl", "/usr/share/man/man8/brokerd.8",
            "/usr/share/man/man1/brokerctl.1",
            "/usr/share/man/man5/broker.conf.5", "/usr/share/bash-completion/completions/brokerctl",
            "/usr/share/zsh/site-functions/_brokerd", "/usr/share/fish/vendor_completions.d/brokerctl.fish",
            "/usr/lib/systemd/user/shared-device-broker.service",
            "/usr/share/doc/shared-device-broker/broker.conf.example",
        ] {
            #expect(installed.contains(expected), "\(expected) not installed: \(installed)")
        }
        let completion = try String(
            contentsOfFile: stage + "/usr/share/bash-completion/completions/brokerctl", encoding: .utf8)
        #expect(completion.contains("sign-in") && completion.contains("--client-id"))
        let page = try String(contentsOfFile: stage + "/usr/share/man/man5/broker.conf.5", encoding: .utf8)
        #expect(page.contains(".TH \"broker.conf\" \"5\""), "\(page.prefix(200))")

        // The sample is one brokerd reads as it is.
        let sample = try String(
            contentsOfFile: stage + "/usr/share/doc/shared-device-broker/broker.conf.example", encoding: .utf8)
        #expect(sample.contains("\"deviceMode\""), "\(sample)")

        let uninstall = try await offThePool { try runMake(["uninstall"] + common) }
        #expect(uninstall.status == 0, "\(uninstall.stderr)")
        let left = try Self.files(under: stage)
        #expect(left.isEmpty, "left behind: \(left)")
    }

    /// Every file and link below `root`, as absolute paths inside it.
    static func files(under root: String) throws -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: root) else { return [] }
        var found: [String] = []
        for case let path as String in walker {
            var directory: ObjCBool = false
            let full = root + "/" + path
            let isLink = (try? FileManager.default.destinationOfSymbolicLink(atPath: full)) != nil
            if isLink || (FileManager.default.fileExists(atPath: full, isDirectory: &directory) && !directory.boolValue)
            {
                found.append("/" + path)
            }
        }
        return found.sorted()
    }
}
