import BrokerCore
import Glibc

/// The real time.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Int64 { Int64(time(nil)) }

    public func nowMicroseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1_000
    }
}
