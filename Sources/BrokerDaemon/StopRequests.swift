import DBus
import Glibc
import Locking

/// The pipe SIGTERM and SIGINT are written to by ``StopRequests``'s handler (its write end).
nonisolated(unsafe) private var stopSignalPipe: Int32 = -1

/// SIGTERM, SIGINT or the loss of the bus: the reasons brokerd stops. Installed before the
/// bus name is taken, so a stop request that comes right after start-up is never lost.
///
/// The handler is brokerd's own (`sigaction`, in place when `init` returns): it writes the
/// signal's number to a pipe, which a thread of its own reads (blocked in `read`, it wakes only
/// for a signal) and turns into a reason. Not a dispatch source: libdispatch's pool wakes the
/// process every second (see `TaskPool`), and its signal source installs its handler
/// asynchronously, so a signal that came before would be lost.
/// `@unchecked`: its stored properties are set once; `next()` is awaited by one task at a time.
final class StopRequests: @unchecked Sendable {
    private let reasons: AsyncStream<String>
    private let continuation: AsyncStream<String>.Continuation
    private let watcher: Task<Void, Never>

    init(_ connection: DBusConnection) {
        signal(SIGPIPE, SIG_IGN)
        let (reasons, continuation) = AsyncStream<String>.makeStream()
        self.reasons = reasons
        self.continuation = continuation
        var ends: [Int32] = [-1, -1]
        if stopSignalPipe < 0, pipe(&ends) == 0 {
            for end in ends {
                _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            }
            // The handler never blocks; the reader does, on its own thread.
            _ = fcntl(ends[1], F_SETFL, O_NONBLOCK)
            stopSignalPipe = ends[1]
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(stopSignalPipe, &byte, 1)
                errno = saved
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(SIGTERM, &action, nil)
            sigaction(SIGINT, &action, nil)
            let readEnd = ends[0]
            let failure = startDetachedThread {
                var byte: UInt8 = 0
                while true {
                    let count = read(readEnd, &byte, 1)
                    if count == 1 {
                        continuation.yield(Int32(byte) == SIGINT ? "SIGINT" : "SIGTERM")
                    } else if count < 0, errno == EINTR {
                        continue
                    } else {
                        return
                    }
                }
            }
            if failure != 0 {
                // Without the reader, the default action ends brokerd: no clean stop, nothing lost.
                signal(SIGTERM, SIG_DFL)
                signal(SIGINT, SIG_DFL)
            }
        }
        watcher = Task {
            await connection.waitUntilDisconnected()
            continuation.yield("the bus connection was lost")
        }
    }

    deinit {
        watcher.cancel()
        continuation.finish()
    }

    /// Waits for the first reason to stop.
    func next() async -> String {
        for await reason in reasons { return reason }
        return "stopped"
    }
}

/// Opens once; any number of tasks wait for it, each waiting ending early when its task is
/// cancelled. A second stop request hurries every gate's stop through one of these.
final class Latch: Sendable {
    private struct State {
        var open = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var next: UInt64 = 0
    }
    private let state = Locked(State())

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the latch is open, or when the calling task is cancelled.
    func wait() async {
        let id = state.withLock { state in
            state.next &+= 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    if state.open || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
