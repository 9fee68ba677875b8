import Glibc

/// Monotonic clock in nanoseconds.
func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

extension Duration {
    /// Nanoseconds, clamped to 0...UInt64.max / 4.
    var clampedNanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        if seconds > 1_000_000_000 { return 1_000_000_000 * 1_000_000_000 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}

/// A one-shot reply slot a thread can wait on: the connection thread delivers, a caller of
/// `callBlocking` waits (bounded) on a condition variable on the monotonic clock.
final class BlockingReply: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var result: Result<[DBusValue], any Error>?

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Stores the first result and wakes the waiter; later results are ignored. Never blocks for long.
    func deliver(_ outcome: Result<[DBusValue], any Error>) {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard result == nil else { return }
        result = outcome
        pthread_cond_signal(condition)
    }

    /// The result, or nil when none came by `deadline` (monotonic nanoseconds).
    func wait(until deadline: UInt64) -> Result<[DBusValue], any Error>? {
        var limit = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while result == nil {
            // Spurious wake-ups and EINTR loop; only the deadline ends the wait without a result.
            if pthread_cond_timedwait(condition, mutex, &limit) == ETIMEDOUT { break }
        }
        return result
    }
}
