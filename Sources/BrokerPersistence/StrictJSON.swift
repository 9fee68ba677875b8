/// The rules for JSON that people and other programs hand brokerd: its configuration files and
/// the requests of Microsoft's broker protocol. Plain RFC 8259, which `JSONDecoder` is not: it
/// lets a byte order mark through, and keeps one of two values given for the same key. Here a
/// key given twice in an object is refused, since which of the two its writer meant is not for
/// brokerd to guess, and so is anything but JSON (a trailing comma, a comment), so that a file
/// that looks right to one reader means the same to brokerd. Configuration files also refuse
/// `null` (a key given as null reads as absent: `"clients": null` would admit every app) and
/// control characters in keys and strings (a NUL cuts a path short in every C call it reaches).
///
/// It checks a document only; the types that read it (`Decodable`) decide its shape.
package enum StrictJSON {
    package struct Rules: Sendable {
        /// Whether `null` may stand for a value.
        package var allowsNull: Bool
        /// Whether keys and strings may hold control characters (Unicode's Cc, escaped: a raw one
        /// is never JSON).
        package var allowsControlCharacters: Bool

        /// brokerd's configuration files.
        package static let configuration = Rules(allowsNull: false, allowsControlCharacters: false)
        /// Requests of another broker's protocol, whose clients send null for "not given".
        package static let request = Rules(allowsNull: true, allowsControlCharacters: true)
    }

    /// What is wrong, worded to follow "the configuration file FILE" or "the request".
    package enum Problem: Error, CustomStringConvertible, Equatable {
        case byteOrderMark
        case syntax(line: Int, column: Int, hint: String?)
        case duplicateKey(String, place: String)
        case null(path: String)
        case controlCharacter(UInt32, place: String)

        package var description: String {
            switch self {
            case .byteOrderMark:
                return "starts with a byte order mark, which JSON does not allow (RFC 8259): save it as UTF-8 "
                    + "without one"
            case .syntax(let line, let column, let hint):
                return "is not valid JSON at line \(line), column \(column)" + (hint.map { ": \($0)" } ?? "")
            case .duplicateKey(let key, let place):
                return "has the key \"\(key)\" twice \(place): keep one (brokerd does not guess which one was meant)"
            case .null(let path):
                return "has null for \(path): leave the key out to keep its default, or give a value"
            case .controlCharacter(let scalar, let place):
                let code = String(scalar, radix: 16, uppercase: true)
                return "has a control character (U+\(String(repeating: "0", count: max(0, 4 - code.count)))\(code)) "
                    + "in \(place): remove it"
            }
        }
    }

    /// Checks `bytes` against `rules`; the first problem found is thrown.
    package static func check(_ bytes: [UInt8], rules: Rules) throws(Problem) {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { throw .byteOrderMark }
        let outcome: Result<Void, Problem> = bytes.withUnsafeBufferPointer { buffer in
            var walker = Walker(reader: JSONReader(buffer), rules: rules)
            do throws(Walker.Failure) {
                try walker.value(path: [], depth: 0)
                do throws(JSONReader.Problem) { try walker.reader.end() } catch { throw .reader(error) }
                return .success(())
            } catch {
                switch error {
                case .problem(let problem): return .failure(problem)
                case .reader(let problem):
                    let offset: Int
                    if case .syntax(let at) = problem { offset = at } else { offset = walker.reader.position }
                    return .failure(syntaxProblem(buffer, at: offset))
                }
            }
        }
        try outcome.get()
    }

    /// Where in the text the reader stopped, with what most likely went wrong there.
    private static func syntaxProblem(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int) -> Problem {
        let offset = min(max(0, offset), bytes.count)
        var line = 1
        var lineStart = 0
        for index in 0..<offset where bytes[index] == UInt8(ascii: "\n") {
            line += 1
            lineStart = index + 1
        }
        let hint: String?
        if offset == bytes.count {
            hint = "it ends before the JSON does"
        } else if bytes[offset] == UInt8(ascii: "/") {
            hint = "comments are not JSON"
        } else if bytes[offset] == UInt8(ascii: "}") || bytes[offset] == UInt8(ascii: "]"),
            bytes[..<offset].last(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) == UInt8(ascii: ",")
        {
            hint = "a comma before a closing bracket (trailing commas are not JSON)"
        } else if bytes[offset] < 0x20 {
            hint = "a control character not escaped in a string"
        } else {
            hint = nil
        }
        return .syntax(line: line, column: offset - lineStart + 1, hint: hint)
    }

    private enum Step {
        case key(String)
        case index(Int)
    }

    /// `clients[0].allowedExecutables[1]`.
    private static func render(_ path: [Step]) -> String {
        guard !path.isEmpty else { return "the whole document" }
        var text = ""
        for step in path {
            switch step {
            case .key(let key): text += text.isEmpty ? key : ".\(key)"
            case .index(let index): text += "[\(index)]"
            }
        }
        return text
    }

    private struct Walker {
        enum Failure: Error {
            case reader(JSONReader.Problem)
            case problem(Problem)
        }

        var reader: JSONReader
        let rules: Rules

        mutating func value(path: [Step], depth: Int) throws(Failure) {
            do {
                guard depth < JSONReader.maxDepth else { throw JSONReader.Problem.syntax(reader.position) }
                switch try reader.kind() {
                case .object:
                    try reader.openObject()
                    var keys = Set<String>()
                    var first = true
                    while let (range, escaped) = try reader.nextKeyRange(first: first) {
                        first = false
                        let key = try reader.decodeString(range, escaped: escaped)
                        let place = path.isEmpty ? "at the top level" : "in \(render(path))"
                        if !rules.allowsControlCharacters, let control = Self.firstControl(key) {
                            throw Failure.problem(.controlCharacter(control, place: "a key \(place)"))
                        }
                        guard keys.insert(key).inserted else { throw Failure.problem(.duplicateKey(key, place: place)) }
                        try value(path: path + [.key(key)], depth: depth + 1)
                    }
                case .array:
                    try reader.openArray()
                    var index = 0
                    while try reader.nextElement(first: index == 0) {
                        try value(path: path + [.index(index)], depth: depth + 1)
                        index += 1
                    }
                case .string:
                    let (range, escaped) = try reader.stringRange()
                    // Escaped or not: DEL and U+0080 to U+009F need no escape in JSON.
                    if !rules.allowsControlCharacters,
                        let control = Self.firstControl(try reader.decodeString(range, escaped: escaped))
                    {
                        throw Failure.problem(.controlCharacter(control, place: render(path)))
                    }
                case .null:
                    guard rules.allowsNull else { throw Failure.problem(.null(path: render(path))) }
                    try reader.skipValue()
                case .number, .bool:
                    try reader.skipValue()
                }
            } catch let failure as Failure {
                throw failure
            } catch let problem as JSONReader.Problem {
                throw .reader(problem)
            } catch {
                throw .reader(.syntax(reader.position))
            }
        }

        /// The first control character of `text` (Cc: U+0000 to U+001F, U+007F to U+009F).
        static func firstControl(_ text: String) -> UInt32? {
            text.unicodeScalars.first { $0.properties.generalCategory == .control }?.value
        }
    }
}
