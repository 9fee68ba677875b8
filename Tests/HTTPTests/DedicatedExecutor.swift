// A task executor backed by one dedicated thread, for the tests that measure how soon the client
// reports a timeout or a cancellation.
//
// Why: `swift test` runs every test target in one process, and on Linux Swift's global executor
// shares libdispatch's global worker pool with `DispatchQueue.global()`. Test helpers elsewhere
// park pool workers in blocking calls (a read loop per idp-sim child, synchronous process waits);
// libdispatch then adds only about one replacement worker per second, so every task on the global
// executor can stall for ~20 s. The client's own worker thread is unaffected and answers on time,
// but a test measuring on the global executor would see the stall, not the client.
// Jobs of a task that prefers this executor (`withTaskExecutorPreference`, or
// `Task(executorPreference:)`) run on its thread, including resumptions of continuations resumed by
// the client's worker thread or the loopback server's threads. `Task.sleep` still wakes through the
// global pool, so timed sections must not sleep; they wait on ``LoopbackServer/wait(within:until:)``.

import Locking

@testable import HTTP

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    /// One executor thread for the whole test process; it lives as long as the process.
    static let shared = DedicatedThreadExecutor()

    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var jobs: [UnownedJob] = []  // guarded by mutex

    private init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
        let failure = startDetachedThread { [self] in run() }
        precondition(failure == 0, "could not start the test executor thread")
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        pthread_mutex_lock(mutex)
        jobs.append(job)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    private func run() {
        while true {
            pthread_mutex_lock(mutex)
            while jobs.isEmpty { pthread_cond_wait(condition, mutex) }
            let batch = jobs
            jobs.removeAll()
            pthread_mutex_unlock(mutex)
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }
}

/// Runs `body` with its jobs on ``DedicatedThreadExecutor/shared`` (see the file comment).
func onDedicatedThread<T, Failure: Error>(_ body: () async throws(Failure) -> T) async throws(Failure) -> T {
    try await withTaskExecutorPreference(DedicatedThreadExecutor.shared, operation: body)
}

/// Runs `body` on a new detached thread after `delay` (a plain sleep, off every executor).
func afterDelay(_ delay: Duration, _ body: @escaping @Sendable () -> Void) {
    let (seconds, attoseconds) = max(delay, .zero).components
    let failure = startDetachedThread {
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0, errno == EINTR { request = remaining }
        body()
    }
    precondition(failure == 0, "could not start a timer thread")
}
