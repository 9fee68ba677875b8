import Glibc

/// The one strict JSON reader over bytes (RFC 8259: no trailing commas, no comments, no raw
/// control characters in strings, valid UTF-8 in the strings it makes, nesting at most 256 deep).
/// It reads values in place, a step at a time, so a reader of one shape (the state file's) pays
/// for no tree; only the strings asked for become Strings. ``StrictJSON`` walks it for documents
/// people and other programs write, and ``JSONValue/parse(_:rules:)`` builds a tree with it.
/// What a string may hold besides valid UTF-8 is its caller's rule.
///
/// Its steps are `@inlinable`: the state file of 10,000 clients is read through them at start.
public struct JSONReader {
    public enum Problem: Error, Equatable {
        /// Not JSON, at this byte offset.
        case syntax(Int)
        /// JSON, not the expected shape.
        case shape(String)
    }

    public enum Kind: Equatable, Sendable {
        case object, array, string, number, bool, null

        public var name: String {
            switch self {
            case .object: return "an object"
            case .array: return "an array"
            case .string: return "a string"
            case .number: return "a number"
            case .bool: return "a boolean"
            case .null: return "null"
            }
        }
    }

    public static let maxDepth = 256

    public let bytes: UnsafeBufferPointer<UInt8>
    public var position = 0

    @inlinable public init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    @usableFromInline var syntax: Problem { .syntax(position) }

    @inlinable public mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    /// The kind of the next value (whitespace skipped).
    @inlinable public mutating func kind() throws(Problem) -> Kind {
        skipWhitespace()
        guard position < bytes.count else { throw syntax }
        switch bytes[position] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        default: throw syntax
        }
    }

    /// Where the next value starts.
    @inlinable public mutating func valueStart() throws(Problem) -> Int {
        _ = try kind()
        return position
    }

    @inlinable public mutating func expect(_ expected: Kind, _ path: String) throws(Problem) {
        let found = try kind()
        guard found == expected else { throw .shape("\(path) is \(found.name), not \(expected.name)") }
    }

    /// Reads the value at `offset` with `body`, or gives nil without one.
    @inlinable public mutating func at<T>(_ offset: Int?, _ body: (inout JSONReader) throws(Problem) -> T)
        throws(Problem) -> T?
    {
        guard let offset else { return nil }
        position = offset
        return try body(&self)
    }

    /// Reads the value at `offset` with `body`; the value must be there.
    @inlinable public mutating func at<T>(
        _ offset: Int?, _ path: String, _ body: (inout JSONReader) throws(Problem) -> T
    ) throws(Problem)
        -> T
    {
        guard let offset else { throw .shape("it has no \(path)") }
        position = offset
        return try body(&self)
    }

    /// Only whitespace is left.
    @inlinable public mutating func end() throws(Problem) {
        skipWhitespace()
        guard position == bytes.count else { throw syntax }
    }

    @inlinable mutating func consume(_ byte: UInt8) throws(Problem) {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == byte else { throw syntax }
        position += 1
    }

    @inlinable public mutating func openObject() throws(Problem) { try consume(UInt8(ascii: "{")) }

    /// The range of the next key of the object being read (its value comes next), or nil at its
    /// end; ``decodeString(_:escaped:)`` makes the key's String.
    @inlinable public mutating func nextKeyRange(first: Bool) throws(Problem) -> (Range<Int>, escaped: Bool)? {
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return nil
        }
        if !first { try consume(UInt8(ascii: ",")) }
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw syntax }
        let key = try stringRange()
        try consume(UInt8(ascii: ":"))
        return key
    }

    @inlinable public mutating func openArray() throws(Problem) { try consume(UInt8(ascii: "[")) }

    /// Whether the array being read has another element (which comes next); false at its end.
    @inlinable public mutating func nextElement(first: Bool) throws(Problem) -> Bool {
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return false
        }
        if !first { try consume(UInt8(ascii: ",")) }
        return true
    }

    /// Whether a key `nextKeyRange` gave is `name` (written without escapes, as brokerd writes keys).
    @inlinable public func key(_ key: (Range<Int>, escaped: Bool), is name: StaticString) -> Bool {
        guard !key.escaped, key.0.count == name.utf8CodeUnitCount, let base = bytes.baseAddress else { return false }
        return memcmp(base + key.0.lowerBound, name.utf8Start, key.0.count) == 0
    }

    /// Skips one value, checking its syntax.
    @inlinable public mutating func skipValue(depth: Int = 0) throws(Problem) {
        guard depth < Self.maxDepth else { throw syntax }
        switch try kind() {
        case .object:
            try openObject()
            var first = true
            while try nextKeyRange(first: first) != nil {
                first = false
                try skipValue(depth: depth + 1)
            }
        case .array:
            try openArray()
            var first = true
            while try nextElement(first: first) {
                first = false
                try skipValue(depth: depth + 1)
            }
        case .string:
            _ = try stringRange()
        case .number:
            _ = try numberRange()
        case .bool:
            if !literal("true") && !literal("false") { throw syntax }
        case .null:
            if !literal("null") { throw syntax }
        }
    }

    @inlinable mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - position >= count else { return false }
        for index in 0..<count where bytes[position + index] != word.utf8Start[index] { return false }
        position += count
        return true
    }

    /// The bytes between the quotes of the string at the position (escapes checked, not decoded).
    @inlinable public mutating func stringRange() throws(Problem) -> (Range<Int>, escaped: Bool) {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw syntax }
        position += 1
        let start = position
        var escaped = false
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                position += 1
                return (start..<(position - 1), escaped)
            }
            if byte < 0x20 { throw syntax }
            if byte == UInt8(ascii: "\\") {
                escaped = true
                position += 1
                guard position < bytes.count else { throw syntax }
                switch bytes[position] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    break
                case UInt8(ascii: "u"):
                    guard bytes.count - position > 4 else { throw syntax }
                    for index in 1...4 where Self.hexValue(bytes[position + index]) == nil { throw syntax }
                    position += 4
                default:
                    throw syntax
                }
            }
            position += 1
        }
        throw syntax
    }

    /// Whether two ranges of the text hold the same bytes.
    @inlinable public func equalBytes(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        guard let base = bytes.baseAddress else { return a.isEmpty }
        return memcmp(base + a.lowerBound, base + b.lowerBound, a.count) == 0
    }

    /// The string of a range `stringRange` gave, its escapes decoded; it must be valid UTF-8. What
    /// it may hold besides is the caller's rule (``StrictJSON``'s for files people write).
    @inlinable public func decodeString(_ range: Range<Int>, escaped: Bool) throws(Problem) -> String {
        if !escaped {
            guard let string = String(validating: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self) else {
                throw .syntax(range.lowerBound)
            }
            return string
        }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(range.count)
        var index = range.lowerBound
        while index < range.upperBound {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "\\") else {
                decoded.append(byte)
                index += 1
                continue
            }
            let code = bytes[index + 1]
            index += 2
            switch code {
            case UInt8(ascii: "b"): decoded.append(0x08)
            case UInt8(ascii: "f"): decoded.append(0x0C)
            case UInt8(ascii: "n"): decoded.append(0x0A)
            case UInt8(ascii: "r"): decoded.append(0x0D)
            case UInt8(ascii: "t"): decoded.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(at: index)
                index += 4
                if (0xD800..<0xDC00).contains(scalar) {
                    // A high surrogate must be followed by an escaped low one.
                    guard index + 6 <= range.upperBound, bytes[index] == UInt8(ascii: "\\"),
                        bytes[index + 1] == UInt8(ascii: "u")
                    else {
                        throw .syntax(index)
                    }
                    let low = hex4(at: index + 2)
                    guard (0xDC00..<0xE000).contains(low) else { throw .syntax(index) }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    index += 6
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw .syntax(index) }
                decoded.append(contentsOf: UTF8.encode(unicode).map { Array($0) } ?? [])
            default: decoded.append(code)  // " \ /
            }
        }
        guard let string = String(validating: decoded, as: UTF8.self) else { throw .syntax(range.lowerBound) }
        return string
    }

    @inlinable func hex4(at index: Int) -> UInt32 {
        var value: UInt32 = 0
        for offset in 0..<4 { value = value << 4 | UInt32(Self.hexValue(bytes[index + offset]) ?? 0) }
        return value
    }

    @inlinable static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// The number at the position (RFC 8259's grammar).
    @inlinable public mutating func numberRange() throws(Problem) -> Range<Int> {
        let start = position
        func digits() -> Int {
            let from = position
            while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) {
                position += 1
            }
            return position - from
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count else { throw syntax }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else if digits() == 0 {
            throw syntax
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard digits() > 0 else { throw syntax }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard digits() > 0 else { throw syntax }
        }
        return start..<position
    }

    /// The number at the position when it is an integer that fits an Int (`2`, `2.0`, `2e0`), else nil.
    @inlinable public mutating func readInteger() throws(Problem) -> Int? {
        let range = try numberRange()
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
        if let value = Int(text) { return value }
        guard let double = Double(text) else { return nil }
        return Int(exactly: double)
    }

    @inlinable public mutating func readBool(_ path: String) throws(Problem) -> Bool {
        try expect(.bool, path)
        if literal("true") { return true }
        if literal("false") { return false }
        throw syntax
    }
}
