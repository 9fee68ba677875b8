import Foundation
import Logging
import TestSupport
import Testing

@testable import BrokerDaemon

/// The clean-up's bounds, from the person's side: a file system they mount inside a listed
/// folder (a FUSE mount that never answers would otherwise hold the clean-up, and every sign-in
/// waiting for it, forever) and a tree that takes longer than the clean-up's time.
@Suite("The clean-up's walk: mounts and its time")
struct HomeCleanerTests {
    private let files = FileManager.default

    private func home(with paths: [String]) throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory()
        for path in paths {
            let full = directory.path + "/" + path
            try files.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            #expect(files.createFile(atPath: full, contents: Data("x".utf8)))
        }
        return directory
    }

    /// A real mount (tmpfs) below the home: root only, as the suite runs in CI; said when skipped.
    @Test("a file system mounted inside a listed folder is neither entered nor emptied")
    func mountedFileSystemIsNotEntered() throws {
        guard geteuid() == 0 else { try Test.cancel("mounting a tmpfs needs root") }
        let home = try self.home(with: ["Downloads/report.pdf"])
        let stick = home.path + "/Downloads/usb stick"
        try files.createDirectory(atPath: stick, withIntermediateDirectories: true)
        guard mount("tmpfs", stick, "tmpfs", 0, "size=1m") == 0 else {
            try Test.cancel("cannot mount a tmpfs here: \(String(cString: strerror(errno)))")
        }
        defer { umount2(stick, 0) }
        #expect(files.createFile(atPath: stick + "/photo.jpg", contents: Data("x".utf8)))
        let cleaner = try HomeCleaner(listed: ["~/Downloads/*"], home: home.path, logger: Logger(label: "test"))
        #expect(HomeCleaner.mountPoints(below: home.path).contains(stick))
        let report = cleaner.cleanNow()
        #expect(!files.fileExists(atPath: home.path + "/Downloads/report.pdf"))
        #expect(files.fileExists(atPath: stick + "/photo.jpg"), "the mounted file system was emptied")
        #expect(report.failed.contains { $0.contains("usb stick") && $0.contains("another file system") }, "\(report)")
    }

    @Test("past its time the walk stops, and says what it left")
    func timeBudget() throws {
        let home = try self.home(with: ["Downloads/a", "Downloads/b/c"])
        var cleaner = try HomeCleaner(listed: ["~/Downloads/*"], home: home.path, logger: Logger(label: "test"))
        cleaner.timeBudget = 0
        let report = cleaner.cleanNow()
        #expect(
            files.fileExists(atPath: home.path + "/Downloads/a") || files.fileExists(atPath: home.path + "/Downloads/b")
        )
        #expect(report.failedCount == 1 && report.failed.first?.contains("ran out of its time") == true, "\(report)")
    }

    @Test("mountinfo's escapes are read back")
    func mountinfoEscapes() {
        #expect(HomeCleaner.unescapedMountPoint("/home/kiosk/usb\\040stick") == "/home/kiosk/usb stick")
        #expect(HomeCleaner.unescapedMountPoint("/plain") == "/plain")
        #expect(HomeCleaner.unescapedMountPoint("/cut\\04") == "/cut\\04")
    }
}
