import BrokerCore
import Glibc

/// The real time.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Int64 { Int64(time(nil)) }
}
