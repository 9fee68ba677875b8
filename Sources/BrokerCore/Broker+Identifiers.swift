import Synchronization

/// The random identifiers the broker makes: correlation ids and the device id (UUID version 4).
extension Broker {

    /// A correlation id for a request: an RFC 4122 version 4 UUID string, unique in this
    /// process (a counter) and across processes (a random seed). Made on every silent call, so
    /// without a system call: they only need to tell requests apart in logs, not be secret.
    static func newCorrelationId() -> String {
        let n = correlationCounter.wrappingAdd(1, ordering: .relaxed).oldValue
        return uuidString(splitMix(correlationSeed &+ 2 &* n), splitMix(correlationSeed &+ 2 &* n &+ 1))
    }

    private static let correlationSeed: UInt64 = {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }()
    private static let correlationCounter = Atomic<UInt64>(0)

    /// SplitMix64's output function: distinct inputs give distinct, well-mixed outputs.
    private static func splitMix(_ input: UInt64) -> UInt64 {
        var z = input &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Sixteen bytes as a version 4 UUID string (the version and variant bits set).
    private static func uuidString(_ high: UInt64, _ low: UInt64) -> String {
        var bytes = (high, low)
        return withUnsafeMutableBytes(of: &bytes) { b in
            b[6] = (b[6] & 0x0F) | 0x40
            b[8] = (b[8] & 0x3F) | 0x80
            return String(unsafeUninitializedCapacity: 36) { out in
                func hex(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : 0x57 + nibble }
                var at = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    out[at] = hex(b[i] >> 4)
                    out[at + 1] = hex(b[i] & 0x0F)
                    at += 2
                }
                return at
            }
        }
    }

    /// A new device id: a random UUID, for a device without state.
    public static func newDeviceId() -> String {
        var generator = SystemRandomNumberGenerator()
        return uuidString(generator.next(), generator.next())
    }
}
