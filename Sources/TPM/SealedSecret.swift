/// A secret sealed to one TPM: the sealed object's public and private areas as the TPM made them
/// (marshalled TPM2B_PUBLIC and TPM2B_PRIVATE). The private area is encrypted under the TPM's
/// storage key, so these bytes may be stored anywhere; only the TPM they were sealed on, given the
/// PIN, gives the secret back.
public struct SealedSecret: Codable, Equatable, Sendable {
    public var publicArea: [UInt8]
    public var privateArea: [UInt8]

    /// The first byte of ``bytes``: this layout.
    public static let formatVersion: UInt8 = 1

    public init(publicArea: [UInt8], privateArea: [UInt8]) {
        self.publicArea = publicArea
        self.privateArea = privateArea
    }

    /// One byte string to store: the format version, then each area after its length (2 bytes,
    /// big-endian).
    public var bytes: [UInt8] {
        var out: [UInt8] = [Self.formatVersion]
        for area in [publicArea, privateArea] {
            out += [UInt8(truncatingIfNeeded: area.count >> 8), UInt8(truncatingIfNeeded: area.count)]
            out += area
        }
        return out
    }

    /// Reads ``bytes`` back; another version or a length that does not add up is refused.
    public init(bytes: [UInt8]) throws(TPMError) {
        guard bytes.first == Self.formatVersion else {
            throw .malformed(
                "a sealed secret of an unknown format (version byte \(bytes.first.map(String.init) ?? "none"))")
        }
        var areas: [[UInt8]] = []
        var index = 1
        for _ in 0..<2 {
            guard index + 2 <= bytes.count else { throw .malformed("a sealed secret cut short") }
            let count = Int(bytes[index]) << 8 | Int(bytes[index + 1])
            index += 2
            guard count > 0, index + count <= bytes.count else { throw .malformed("a sealed secret cut short") }
            areas.append(Array(bytes[index..<index + count]))
            index += count
        }
        guard index == bytes.count else { throw .malformed("a sealed secret with bytes after its end") }
        self.init(publicArea: areas[0], privateArea: areas[1])
    }
}
