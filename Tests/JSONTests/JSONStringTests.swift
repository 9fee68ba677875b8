import Foundation
import JSON
import Testing

/// JSON strings written by hand: what JSONEncoder (`.withoutEscapingSlashes`) writes, for every
/// scalar of the first two planes' interesting ranges, and what a JSON reader reads back.
@Suite("JSON strings: the one writer")
struct JSONStringTests {
    @Test("every control character, the characters JSON escapes, and text beyond ASCII")
    func asJSONEncoderWritesThem() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        var scalars = Array(0...0x7F) + [0xA0, 0xE9, 0x2028, 0x2029, 0x202E, 0xFEFF, 0xFFFD, 0x1_F600]
        scalars += Array(0xD7F0...0xD7FF) + Array(0xE000...0xE00F)
        for value in scalars {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let text = "a" + String(Character(scalar)) + "/b"
            let ours = JSONWriter.quoted(text)
            #expect(ours == String(decoding: try encoder.encode(text), as: UTF8.self), "U+\(String(value, radix: 16))")
            let read = try JSONSerialization.jsonObject(with: Data(ours.utf8), options: .fragmentsAllowed)
            #expect(read as? String == text, "U+\(String(value, radix: 16))")
        }
    }
}
