/// The one JSON writer: JSON text appended to a byte buffer, strings written the way Foundation's
/// `JSONEncoder` writes them with `.withoutEscapingSlashes` (`"` and `\` escaped, `\n`, `\r`,
/// `\t`, `\b` and `\f` by name, every other control character as `\u00xx`, everything else,
/// slashes and text beyond ASCII, as it is). For JSON written by hand where `JSONEncoder` is too
/// slow (the state file) or would bring Foundation; the rest uses `JSONEncoder`.
public struct JSONWriter {
    public var bytes: [UInt8] = []

    @inlinable public init(capacity: Int = 64) { bytes.reserveCapacity(capacity) }

    /// The text written, as a String.
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    /// `string` as a JSON string literal, quoted.
    public static func quoted(_ string: String) -> String {
        var writer = JSONWriter(capacity: string.utf8.count + 2)
        writer.string(string)
        return writer.text
    }

    /// `string` as a JSON string literal, quoted, at the end of `text`.
    public static func append(_ string: String, to text: inout String) {
        text += quoted(string)
    }

    @inlinable public mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    @inlinable public mutating func raw(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n`, `\t`, … or `\u00XX`.
    @inlinable public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        let plain = value.withUTF8 { utf8 in
            // Almost every string needs no escape: copied at once.
            guard !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
                return false
            }
            bytes.append(contentsOf: utf8)
            return true
        }
        if !plain { escaped(value) }
        bytes.append(UInt8(ascii: "\""))
    }

    /// A JSON array of strings.
    @inlinable public mutating func strings(_ values: [String]) {
        raw("[")
        for (index, value) in values.enumerated() {
            if index > 0 { raw(",") }
            string(value)
        }
        raw("]")
    }

    @usableFromInline mutating func escaped(_ value: String) {
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0x08: raw("\\b")
            case 0x0C: raw("\\f")
            case 0..<0x20:
                raw("\\u00")
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0x0F)])
            default: bytes.append(byte)
            }
        }
    }
}
