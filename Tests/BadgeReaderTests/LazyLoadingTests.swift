import BadgeReader
import Foundation
import TestSupport
import Testing

/// libpcsclite stays out of a process that links the badge reader layer until a watcher starts.
@Suite("libpcsclite loaded on first use")
struct PCSCLazyLoadingTests {
    @Test func linkingTheLayerNeedsNoPcsclite() async throws {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let dynamic = try await runCommand("/usr/bin/readelf", ["-d", exe])
        try #require(dynamic.status == 0, "readelf: \(dynamic.stderr)")
        #expect(dynamic.stdout.contains("(NEEDED)"))
        #expect(!dynamic.stdout.contains("libpcsclite"))
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
        let before = try Self.mappedFiles()
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
        let after = try Self.mappedFiles()
        #expect(BadgeWatcher.isLibraryLoaded)
        #expect(after.contains("libpcsclite"))
        if after.contains("libpcsclite") && !before.contains("libpcsclite") { print(Self.childDone) }
    }

    /// /proc/self/maps, read to its end.
    static func mappedFiles() throws -> String {
        let fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ProcessFailure("cannot open /proc/self/maps") }
        defer { close(fd) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            text += buffer[..<count]
        }
        return String(decoding: text, as: UTF8.self)
    }
}
