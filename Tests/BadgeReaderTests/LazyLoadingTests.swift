import BadgeReader
import Foundation
import TestSupport
import Testing

/// libpcsclite stays out of a process that links the badge reader layer until a watcher starts.
@Suite("libpcsclite loaded on first use")
struct PCSCLazyLoadingTests {
    @Test func linkingTheLayerNeedsNoPcsclite() async throws {
        let needed = try await ProcessImage.neededLibraries()
        #expect(!needed.isEmpty)
        #expect(!needed.contains("libpcsclite"), "\(needed)")
    }

    /// This test bundle run again as a fresh process, to run ``childStartsAWatcher()`` alone.
    @Test func aFreshProcessLoadsPcscliteOnlyWhenAWatcherStarts() async throws {
        let directory = try TemporaryDirectory()
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try ChildProcess(
            "test bundle", executable: exe,
            arguments: ["--testing-library", "swift-testing", "--filter", "childStartsAWatcher"],
            // A socket nobody listens on: the watcher loads libpcsclite and finds no pcscd.
            environment: [Self.childVariable: "1", "PCSCLITE_CSOCK_NAME": directory.path + "/none.comm"])
        let status = try await offThePool { try child.waitForExit(timeout: .seconds(60)) }
        #expect(status == 0, "\(child.allOutput)")
        #expect(child.allOutput.contains(Self.childDone), "\(child.allOutput)")
    }

    static let childVariable = "BADGE_READER_TESTS_LAZY_LOAD_CHILD"
    static let childDone = "libpcsclite mapped only after the watcher started"

    @Test(.enabled(if: ProcessInfo.processInfo.environment[Self.childVariable] != nil))
    func childStartsAWatcher() async throws {
        let before = try ProcessImage.mappedFiles()
        #expect(!before.contains("libpcsclite"))
        #expect(!BadgeWatcher.isLibraryLoaded)
        let watcher = BadgeWatcher()
        let events = watcher.events
        try watcher.start()
        let first = await within(.seconds(20)) {
            var iterator = events.makeAsyncIterator()
            return await iterator.next()
        }
        try await offThePool { watcher.stop() }
        guard case .unavailable = first else {
            Issue.record("expected .unavailable, got \(String(describing: first))")
            return
        }
        let after = try ProcessImage.mappedFiles()
        #expect(BadgeWatcher.isLibraryLoaded)
        #expect(after.contains("libpcsclite"))
        if after.contains("libpcsclite") && !before.contains("libpcsclite") { print(Self.childDone) }
    }
}
