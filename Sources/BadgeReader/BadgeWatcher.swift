import CPCSC
import Dispatch
import Locking
import Logging
import TextRules

#if canImport(Glibc)
import Glibc
#endif

/// Watches the PC/SC readers pcscd offers and tells what happens on them as ``BadgeEvent``s.
///
/// The waits for pcscd block (SCardGetStatusChange), so they run on a thread of the watcher's own,
/// never on Swift's cooperative pool. libpcsclite is loaded on the first ``start()``, not before.
/// Without pcscd the watcher says so once (``BadgeEvent/unavailable(_:)``) and tries again every
/// `retryInterval`; a reader that goes away, a badge taken off mid-read, a card that refuses the
/// UID query or has none are each reported, never fatal.
public final class BadgeWatcher: Sendable {
    /// The events, in order, until ``stop()``.
    public let events: AsyncStream<BadgeEvent>
    private let continuation: AsyncStream<BadgeEvent>.Continuation
    private let retryInterval: Duration
    private let logger: Logger
    private let shared = Locked(Shared())
    /// Ends a pause between attempts to reach pcscd early, when the watcher stops.
    private let wake = DispatchSemaphore(value: 0)

    /// What the watcher's thread and its owner share.
    private struct Shared: @unchecked Sendable {
        /// The context the thread waits on; only the thread sets and releases it, both under the lock,
        /// so ``stop()`` never cancels a released one.
        var context: OpaquePointer?
        var started = false
        var stopping = false
        var finished = false
    }

    /// Whether libpcsclite has been loaded into this process.
    public static var isLibraryLoaded: Bool { cpcsc_is_loaded() != 0 }

    /// The longest blocking wait: pcscd is asked again at least this often.
    private static let waitMilliseconds: UInt32 = 10_000
    private static let pnpNotification = CPCSC_PNP_NOTIFICATION
    /// More readers than a desk has; the rest are not watched (pcscd's own limit is 16 with the pseudo reader).
    private static let maxReaders = 15

    public init(retryInterval: Duration = .seconds(2), logger: Logger = Logger(label: "badge-reader")) {
        (events, continuation) = AsyncStream.makeStream(of: BadgeEvent.self, bufferingPolicy: .unbounded)
        self.retryInterval = retryInterval
        self.logger = logger
    }

    deinit { stop() }

    /// Starts the watcher's thread (once; a second call does nothing). Throws when no thread can be started.
    /// The thread holds the watcher until ``stop()``: call it when done.
    public func start() throws(BadgeReaderError) {
        let first = shared.withLock { state -> Bool in
            guard !state.started else { return false }
            state.started = true
            return true
        }
        guard first else { return }
        let rc = startDetachedThread { [self] in
            run()
            shared.withLock { $0.finished = true }
            continuation.finish()
        }
        if rc != 0 {
            shared.withLock { $0.finished = true }
            continuation.finish()
            throw .noThread(rc)
        }
    }

    /// Stops the watcher: cancels its wait and returns once its thread has ended (at most a few
    /// seconds: a card that does not answer holds pcscd's reply that long). Ends ``events``.
    public func stop() {
        let running = shared.withLock { state -> Bool in
            state.stopping = true
            return state.started && !state.finished
        }
        guard running else {
            continuation.finish()
            return
        }
        wake.signal()
        // A cancel that comes before the thread enters its wait is lost (SCardCancel cancels only a
        // running wait), so it is repeated until the thread has ended.
        for _ in 0..<600 {
            let finished = shared.withLock { state -> Bool in
                if !state.finished, let context = state.context { _ = cpcsc_cancel(context) }
                return state.finished
            }
            if finished { return }
            usleep(10_000)
        }
        logger.warning("the badge reader's thread did not end within 6 seconds (pcscd does not answer)")
    }

    private var isStopping: Bool { shared.withLock { $0.stopping } }

    /// What the thread knows about one reader.
    private struct Reader {
        let name: String
        /// The state pcscd last reported (its high 16 bits count the card's comings and goings).
        var state: UInt32 = 0
        /// A badge on it was reported as tapped (and its removal is still to be reported).
        var tapped = false
    }

    /// The thread's loop: (re)connect to pcscd, follow the readers, read each badge put on one.
    private func run() {
        var lastUnavailable: String?
        var refusalsReported = Set<UInt16>()
        while !isStopping {
            var context: OpaquePointer?
            let rc = cpcsc_establish(&context)
            guard rc == CPCSC_OK, let context else {
                let reason = Self.unavailableReason(rc)
                if reason != lastUnavailable {
                    lastUnavailable = reason
                    logger.warning("no badge can be read: \(reason)")
                    continuation.yield(.unavailable(reason))
                }
                pause(retryInterval)
                continue
            }
            let adopted = shared.withLock { state -> Bool in
                guard !state.stopping else { return false }
                state.context = context
                return true
            }
            guard adopted else {
                cpcsc_release(context)
                break
            }
            if lastUnavailable != nil { logger.info("pcscd is back; watching its badge readers") }
            lastUnavailable = nil
            let why = follow(context, refusalsReported: &refusalsReported)
            shared.withLock { state in
                state.context = nil
                cpcsc_release(context)
            }
            if let why, !isStopping {
                lastUnavailable = why
                logger.warning("no badge can be read: \(why)")
                continuation.yield(.unavailable(why))
                pause(retryInterval)
            }
        }
    }

    /// Follows the readers on one context until pcscd goes away (returns why) or the watcher stops (nil).
    private func follow(_ context: OpaquePointer, refusalsReported: inout Set<UInt16>) -> String? {
        var readers: [Reader] = []
        var pnpState: UInt32 = 0
        defer {
            // pcscd went away, or the watcher stops: what was on the readers is gone with it.
            for reader in readers {
                if reader.tapped { continuation.yield(.removed) }
                continuation.yield(.readerRemoved(OutsideText.cleaned(reader.name)))
            }
        }
        while !isStopping {
            let names: [String]
            switch listReaders(context) {
            case .success(let listed): names = Array(listed.prefix(Self.maxReaders))
            case .failure(let code): return Self.unavailableReason(code.value)
            }
            // Readers gone, then readers come.
            readers.removeAll { reader in
                guard !names.contains(reader.name) else { return false }
                if reader.tapped { continuation.yield(.removed) }
                continuation.yield(.readerRemoved(OutsideText.cleaned(reader.name)))
                return true
            }
            for name in names where !readers.contains(where: { $0.name == name }) {
                readers.append(Reader(name: name))
                continuation.yield(.readerAdded(OutsideText.cleaned(name)))
            }
            // One wait on every reader and the pseudo reader that tells of readers coming and going.
            var states = readers.map(\.state) + [pnpState]
            var joined: [UInt8] = []
            for name in readers.map(\.name) + [Self.pnpNotification] { joined += Array(name.utf8) + [0] }
            let rc = joined.withUnsafeBufferPointer { bytes in
                bytes.withMemoryRebound(to: CChar.self) { text in
                    cpcsc_wait(context, text.baseAddress, &states, states.count, Self.waitMilliseconds)
                }
            }
            switch rc {
            case CPCSC_OK: break
            case CPCSC_E_TIMEOUT: continue
            case CPCSC_E_CANCELLED: return nil
            // A reader went away between the list and the wait: list again.
            case CPCSC_E_UNKNOWN_READER, CPCSC_E_READER_UNAVAILABLE: continue
            default: return Self.unavailableReason(rc)
            }
            pnpState = states[readers.count] & ~UInt32(CPCSC_STATE_CHANGED)
            for index in readers.indices {
                let old = readers[index].state
                let new = states[index] & ~UInt32(CPCSC_STATE_CHANGED)
                readers[index].state = new
                guard new != old else { continue }
                handle(&readers[index], old: old, new: new, context: context, refusalsReported: &refusalsReported)
            }
        }
        return nil
    }

    /// Reports what changed on one reader: a badge put on it is read, one taken off is reported.
    private func handle(
        _ reader: inout Reader, old: UInt32, new: UInt32, context: OpaquePointer, refusalsReported: inout Set<UInt16>
    ) {
        let present = new & UInt32(CPCSC_STATE_PRESENT) != 0 && new & UInt32(CPCSC_STATE_MUTE) == 0
        // The card count moved by more than one while a card is present: it was taken off and put
        // back (or another put on) between two waits.
        let anotherCard = present && old & UInt32(CPCSC_STATE_PRESENT) != 0 && (new >> 16) &- (old >> 16) >= 2
        if reader.tapped && (!present || anotherCard) {
            reader.tapped = false
            continuation.yield(.removed)
        }
        guard present, !reader.tapped else { return }
        var uid = [UInt8](repeating: 0, count: 256)
        var length = 0
        var status: UInt16 = 0
        let rc = cpcsc_read_uid(context, reader.name, &uid, uid.count, &length, &status)
        defer { uid.withUnsafeMutableBufferPointer { $0.update(repeating: 0) } }
        switch rc {
        case CPCSC_OK where status == 0x9000 && length > 0:
            reader.tapped = true
            continuation.yield(.tapped(BadgeUID(Array(uid[0..<length]))))
        case CPCSC_OK:
            // A card that is no contactless badge (a contact smart card, a phone), or one that
            // refuses the query: not a tap. Said once per answer, not at every touch.
            logger.debug("a card on \(OutsideText.cleaned(reader.name)) gave no UID; not a tap")
            if refusalsReported.insert(status).inserted {
                let answer = status == 0x9000 ? "an empty UID" : "status \(Self.hex(status))"
                let name = OutsideText.cleaned(reader.name)
                logger.notice(
                    "a card on \(name) answered the UID query (FF CA 00 00 00) with \(answer); ignored, not a tap")
            }
        case CPCSC_W_REMOVED_CARD, CPCSC_E_NO_SMARTCARD, CPCSC_E_READER_UNAVAILABLE, CPCSC_E_UNKNOWN_READER:
            // Taken off (or the reader went away) before it answered: not a tap; the next wait tells the rest.
            logger.debug("a badge left \(OutsideText.cleaned(reader.name)) before its UID was read")
        default:
            logger.notice(
                "reading a badge on \(OutsideText.cleaned(reader.name)) failed: \(Self.describe(rc)); not a tap")
        }
    }

    /// The reader names pcscd lists, or the result code that refused them.
    private func listReaders(_ context: OpaquePointer) -> Result<[String], PCSCCode> {
        var buffer = [CChar](repeating: 0, count: 4096)
        var length = 0
        let rc = cpcsc_list_readers(context, &buffer, buffer.count, &length)
        guard rc == CPCSC_OK else { return .failure(PCSCCode(rc)) }
        let bytes = buffer.prefix(min(length, buffer.count)).map { UInt8(bitPattern: $0) }
        return .success(bytes.split(separator: 0).map { String(decoding: $0, as: UTF8.self) })
    }

    /// Sleeps `duration` (on the watcher's own thread), or less when the watcher stops.
    private func pause(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
        _ = wake.wait(timeout: .now() + .nanoseconds(max(0, nanoseconds)))
    }

    private static func unavailableReason(_ rc: UInt32) -> String {
        switch rc {
        case CPCSC_E_NOT_LOADED:
            cpcsc_load_failure().map { String(cString: $0) } ?? "libpcsclite could not be loaded"
        // F_COMM_ERROR: pcscd closed the connection (it stopped while the watcher waited).
        case CPCSC_E_NO_SERVICE, CPCSC_E_SERVICE_STOPPED, CPCSC_F_COMM_ERROR:
            "pcscd is not running; install and start it (Debian: apt install pcscd; systemctl start pcscd.socket)"
        default:
            "pcscd refused: \(describe(rc))"
        }
    }

    private static func describe(_ rc: UInt32) -> String {
        "\(String(cString: cpcsc_describe(rc))) (\(hex(rc)))"
    }

    private static func hex<T: BinaryInteger>(_ value: T) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return "0x" + String(repeating: "0", count: max(0, MemoryLayout<T>.size * 2 - digits.count)) + digits
    }
}

/// A PC/SC result code, for `Result`.
struct PCSCCode: Error {
    let value: UInt32
    init(_ value: UInt32) { self.value = value }
}

/// Why a watcher could not start.
public enum BadgeReaderError: Error, Sendable, CustomStringConvertible {
    /// No thread could be started (pthread_create's error).
    case noThread(Int32)

    public var description: String {
        switch self {
        case .noThread(let rc): "cannot start the badge reader's thread (pthread_create error \(rc))"
        }
    }
}
