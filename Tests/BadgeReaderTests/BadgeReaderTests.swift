import BadgeReader
import Foundation
import Logging
import TestSupport
import Testing

/// The reader suite below, in a fresh run of this test bundle whose libpcsclite is pointed at a
/// private pcscd socket from the start (it reads the path once, from the environment).
@Suite("Badge reader tests, in a process of their own")
struct BadgeReaderTests {
    static let childVariable = "BADGE_READER_TESTS_CHILD"

    @Test(.timeLimit(.minutes(3))) func theReaderSuite() async throws {
        let run = try TemporaryDirectory()
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try ChildProcess(
            "test bundle", executable: exe,
            arguments: ["--testing-library", "swift-testing", "--filter", "VirtualReaderTests"],
            environment: VirtualBadgeReader.environment(for: run.path).merging([Self.childVariable: "1"]) { $1 })
        let status = try await offThePool { try child.waitForExit(timeout: .seconds(150)) }
        #expect(status == 0, "\(child.allOutput)")
        #expect(child.allOutput.contains("Suite \"Badges on a PC/SC reader\" passed"), "\(child.allOutput)")
        for line in child.stdoutLines where line.hasPrefix("tap to event") { print(line) }
    }
}

/// A real pcscd with vsmartcard's virtual reader, and badges put on it and taken off by the test.
/// Serialized: libpcsclite reads its socket's path once per process, so the tests share one pcscd
/// socket (each starts and stops its own pcscd on it). Runs only in the child of ``BadgeReaderTests``.
@Suite(
    "Badges on a PC/SC reader", .serialized, .timeLimit(.minutes(1)),
    .enabled(if: ProcessInfo.processInfo.environment[BadgeReaderTests.childVariable] != nil))
struct VirtualReaderTests {
    static let alice: [UInt8] = [0x04, 0xA2, 0x3B, 0x91, 0x5C, 0x80, 0x7E]
    static let bob: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF]

    @Test func aTapGivesTheUIDRemovalIsSeenAndASecondBadgeGivesItsOwn() async throws {
        let reader = try VirtualBadgeReader()
        let (watcher, recorder, log) = try Self.started()
        defer { watcher.stop() }
        try await recorder.wait { $0 == .readerAdded(VirtualBadgeReader.readerName) }

        let tapped = ContinuousClock.now
        let first = try reader.tap(uid: Self.alice)
        try await recorder.wait { $0 == .tapped(BadgeUID(Self.alice)) }
        print("tap to event: \(ContinuousClock.now - tapped)")
        let mark = recorder.count
        first.remove()
        try await recorder.wait(from: mark) { $0 == .removed }
        let second = try reader.tap(uid: Self.bob)
        let event = try await recorder.wait(from: mark) { if case .tapped = $0 { true } else { false } }
        #expect(event == .tapped(BadgeUID(Self.bob)))
        second.remove()
        try await recorder.wait(from: recorder.count - 1) { $0 == .removed }
        withExtendedLifetime(reader) {}

        // No UID in any text: events, their debug forms, dump, the log.
        watcher.stop()
        var texts = recorder.events.flatMap { event -> [String] in
            var dumped = ""
            dump(event, to: &dumped)
            return ["\(event)", String(reflecting: event), dumped]
        }
        texts += log.lines
        for uid in [Self.alice, Self.bob] {
            for text in texts { #expect(!Self.mentions(text, uid), "\(text)") }
        }
    }

    @Test func withoutPcscdItSaysSoAndRecoversWhenPcscdComesBack() async throws {
        let reader = try VirtualBadgeReader(started: false)
        let (watcher, recorder, _) = try Self.started()
        defer { watcher.stop() }
        let unavailable = try await recorder.wait { if case .unavailable = $0 { true } else { false } }
        #expect("\(unavailable)".contains("pcscd is not running"))
        #expect("\(unavailable)".contains("apt install pcscd"))

        try reader.startDaemon()
        var mark = recorder.count
        try await recorder.wait(from: mark) { $0 == .readerAdded(VirtualBadgeReader.readerName) }
        let badge = try reader.tap(uid: Self.alice)
        try await recorder.wait(from: mark) { $0 == .tapped(BadgeUID(Self.alice)) }

        // pcscd stops with the badge on: the badge and the reader go, the watcher says why.
        mark = recorder.count
        reader.stopDaemon()
        badge.remove()
        try await recorder.wait(from: mark) { if case .unavailable = $0 { true } else { false } }
        let gone = Array(recorder.events[mark...])
        #expect(gone.contains(.removed))
        #expect(gone.contains(.readerRemoved(VirtualBadgeReader.readerName)))

        // And back, the same watcher.
        try reader.startDaemon()
        mark = recorder.count
        try await recorder.wait(from: mark) { $0 == .readerAdded(VirtualBadgeReader.readerName) }
        let last = try reader.tap(uid: Self.bob)
        try await recorder.wait(from: mark) { $0 == .tapped(BadgeUID(Self.bob)) }
        withExtendedLifetime((reader, last)) {}
    }

    @Test func theReaderGoingAwayWhileABadgeIsReadIsNoTapAndNoCrash() async throws {
        let reader = try VirtualBadgeReader()
        let (watcher, recorder, _) = try Self.started()
        defer { watcher.stop() }
        try await recorder.wait { $0 == .readerAdded(VirtualBadgeReader.readerName) }
        // The badge is asked for its UID and never answers; vpcd's reader goes (with pcscd).
        let stalling = try reader.tap(uid: Self.alice, stall: true)
        try await offThePool { try stalling.waitUntilAsked() }
        var mark = recorder.count
        reader.stopDaemon()
        stalling.remove()
        try await recorder.wait(from: mark) { if case .unavailable = $0 { true } else { false } }
        #expect(recorder.events[mark...].contains(.readerRemoved(VirtualBadgeReader.readerName)))

        try reader.startDaemon()
        mark = recorder.count
        let last = try reader.tap(uid: Self.bob)
        try await recorder.wait(from: mark) { $0 == .tapped(BadgeUID(Self.bob)) }
        #expect(!recorder.events.contains(.tapped(BadgeUID(Self.alice))))
        withExtendedLifetime((reader, last)) {}
    }

    @Test func aBadgeTakenOffBeforeItAnswersIsNoTap() async throws {
        let reader = try VirtualBadgeReader()
        let (watcher, recorder, log) = try Self.started()
        defer { watcher.stop() }
        try await recorder.wait { $0 == .readerAdded(VirtualBadgeReader.readerName) }
        let stalling = try reader.tap(uid: Self.alice, stall: true)
        try await offThePool { try stalling.waitUntilAsked() }
        stalling.remove()
        // vpcd itself answers the transmit with nothing: a failed read, logged.
        try await offThePool { try log.wait { $0.contains("reading a badge on Virtual PCD 00 00 failed") } }
        // The watcher goes on (on vpcd's other slot: this one sees no further card after that).
        let last = try reader.tap(uid: Self.bob, slot: 1)
        let event = try await recorder.wait { if case .tapped = $0 { true } else { false } }
        #expect(event == .tapped(BadgeUID(Self.bob)))
        #expect(!recorder.events.contains(.removed))
        withExtendedLifetime((reader, last)) {}
    }

    @Test func aCardThatRefusesGetDataOrHasNoUIDIsNoTapAndIsLoggedOnce() async throws {
        let reader = try VirtualBadgeReader()
        let (watcher, recorder, log) = try Self.started()
        defer { watcher.stop() }
        try await recorder.wait { $0 == .readerAdded(VirtualBadgeReader.readerName) }
        // 6A 81: function not supported, twice; then a card with an empty UID.
        for status in ["6A81", "6A81", "9000"] {
            let card = try reader.tap(uid: [], status: status)
            let mark = log.lines.count
            try await offThePool { try log.wait(from: mark) { $0.contains("gave no UID; not a tap") } }
            card.remove()
        }
        let last = try reader.tap(uid: Self.bob)
        let event = try await recorder.wait { if case .tapped = $0 { true } else { false } }
        #expect(event == .tapped(BadgeUID(Self.bob)))
        #expect(log.lines.filter { $0.contains("status 0x6A81") }.count == 1, "\(log.lines)")
        #expect(log.lines.filter { $0.contains("an empty UID") }.count == 1, "\(log.lines)")
        #expect(!recorder.events.contains(.removed))
        withExtendedLifetime((reader, last)) {}
    }

    @Test func stoppingEndsTheThreadAndTheStreamPromptly() async throws {
        let reader = try VirtualBadgeReader()
        let (watcher, recorder, _) = try Self.started()
        try await recorder.wait { $0 == .readerAdded(VirtualBadgeReader.readerName) }
        let before = ContinuousClock.now
        try await offThePool { watcher.stop() }
        #expect(ContinuousClock.now - before < .seconds(2))
        try await offThePool { try recorder.waitUntilFinished() }
        _ = reader
    }

    @Test func aUIDNeverPrints() {
        let uid = BadgeUID(Self.alice)
        var dumped = ""
        dump(uid, to: &dumped)
        for text in ["\(uid)", String(reflecting: uid), dumped, "\(BadgeEvent.tapped(uid))"] {
            #expect(!Self.mentions(text, Self.alice), "\(text)")
        }
    }

    /// A watcher started with a log of its own, and what it reports recorded.
    static func started() throws -> (BadgeWatcher, EventRecorder, CapturedLog) {
        let log = CapturedLog()
        let watcher = BadgeWatcher(retryInterval: .milliseconds(200), logger: log.logger)
        let recorder = EventRecorder(watcher.events)
        try watcher.start()
        return (watcher, recorder, log)
    }

    /// Whether `text` shows `uid` in hex (either case, spaced or not, with colons) or as decimal bytes.
    static func mentions(_ text: String, _ uid: [UInt8]) -> Bool {
        let forms = [
            uid.map { String(format: "%02X", $0) }.joined(), uid.map { String(format: "%02x", $0) }.joined(),
            uid.map { String(format: "%02X", $0) }.joined(separator: " "),
            uid.map { String(format: "%02x", $0) }.joined(separator: ":"),
            uid.map { String($0) }.joined(separator: ", "),
        ]
        return forms.contains { text.contains($0) }
    }
}

/// What a watcher reported, in order, for waits bounded in time.
final class EventRecorder: @unchecked Sendable {
    private let condition = NSCondition()
    private var recorded: [BadgeEvent] = []
    private var finished = false

    init(_ events: AsyncStream<BadgeEvent>) {
        Task.detached { [self] in
            for await event in events {
                condition.withLock {
                    recorded.append(event)
                    condition.broadcast()
                }
            }
            condition.withLock {
                finished = true
                condition.broadcast()
            }
        }
    }

    var events: [BadgeEvent] { condition.withLock { recorded } }
    var count: Int { condition.withLock { recorded.count } }

    /// The first event from `index` on that `matches`, waited for at most `timeout`.
    @discardableResult
    func wait(
        from index: Int = 0, timeout: Duration = .seconds(15), _ matches: @escaping @Sendable (BadgeEvent) -> Bool
    ) async throws -> BadgeEvent {
        try await offThePool { [self] in
            let deadline = Date().addingTimeInterval(timeout.seconds)
            return try condition.withLock {
                while true {
                    if let found = recorded[min(index, recorded.count)...].first(where: matches) { return found }
                    if finished || !condition.wait(until: deadline) {
                        throw ProcessFailure("no such event within \(timeout); events: \(recorded)")
                    }
                }
            }
        }
    }

    func waitUntilFinished(timeout: Duration = .seconds(5)) throws {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        try condition.withLock {
            while !finished {
                if !condition.wait(until: deadline) { throw ProcessFailure("the event stream did not end") }
            }
        }
    }
}

/// A swift-log handler that keeps every line (message and metadata) for the test to read.
final class CapturedLog: @unchecked Sendable {
    private let condition = NSCondition()
    private var kept: [String] = []

    var lines: [String] { condition.withLock { kept } }

    var logger: Logger {
        var logger = Logger(label: "badge-reader-test") { _ in Handler(log: self) }
        logger.logLevel = .trace
        return logger
    }

    func append(_ line: String) {
        condition.withLock {
            kept.append(line)
            condition.broadcast()
        }
    }

    func wait(from index: Int = 0, timeout: Duration = .seconds(15), _ matches: (String) -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        try condition.withLock {
            while !kept[min(index, kept.count)...].contains(where: matches) {
                if !condition.wait(until: deadline) { throw ProcessFailure("no such log line; log: \(kept)") }
            }
        }
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            log.append("\(event.level) \(event.message) \(self.metadata.merging(event.metadata ?? [:]) { $1 })")
        }
    }
}
