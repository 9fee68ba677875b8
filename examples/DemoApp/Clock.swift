import Foundation

/// CLOCK_MONOTONIC in nanoseconds. On Linux it is one clock for every process on the machine, so
/// a time taken in one process can be subtracted from one taken in another: that is how the demo
/// measures how long the `AccountChanged` signal took to reach each app.
enum Clock {
    static func monotonicNanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }

    /// From `start` to `end`, in milliseconds with one decimal.
    static func milliseconds(_ start: UInt64, _ end: UInt64) -> String {
        String(format: "%.1f", Double(end &- start) / 1e6)
    }
}
