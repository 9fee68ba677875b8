#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a `pthread_mutex_t`: the one lock of every layer.
///
/// Not `Synchronization.Mutex`: ThreadSanitizer cannot see its Linux implementation and reports
/// false races through it, which would make `--sanitize=thread` useless on this code. Not an
/// actor either: the D-Bus connection thread and libcurl's worker must take it without a hop.
/// Hold it for a few instructions only, never across an `await` or a blocking call. The value is
/// `Sendable`: what one thread puts in, another takes out.
public final class Locked<Value: Sendable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, under the lock.
    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure)
        -> Result
    {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
