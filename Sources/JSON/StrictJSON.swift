/// The rules for JSON that people and other programs hand brokerd: its configuration files, the
/// requests of Microsoft's broker protocol and the providers' answers. Plain RFC 8259, which
/// `JSONDecoder` is not: it lets a byte order mark, UTF-16 and trailing commas through, and keeps
/// the first of two values given for the same key. Here a key given twice in an object is
/// refused, since which of the two its writer meant is not for brokerd to guess (an ID token's
/// claims read one way here and another way by its issuer), and so is anything but JSON (a
/// trailing comma, a comment), so that a document that looks right to one reader means the same to
/// brokerd. Configuration files also refuse `null` (a key given as null reads as absent:
/// `"clients": null` would admit every app) and control characters in keys and strings (a NUL
/// cuts a path short in every C call it reaches).
///
/// ``check(_:rules:)`` checks a document for the types that then read it (`Decodable`, which
/// decide its shape); ``JSONValue/parse(_:rules:)`` reads it into a tree by the same walk.
public enum StrictJSON {
    public struct Rules: Sendable {
        /// Whether `null` may stand for a value.
        public var allowsNull: Bool
        /// Whether keys and strings may hold control characters (Unicode's Cc, escaped: a raw one
        /// is never JSON).
        public var allowsControlCharacters: Bool

        /// brokerd's configuration files.
        public static let configuration = Rules(allowsNull: false, allowsControlCharacters: false)
        /// Requests of another broker's protocol, whose clients send null for "not given".
        public static let request = Rules(allowsNull: true, allowsControlCharacters: true)
        /// A provider's answers: what their strings hold is the outside-text rule's, where they enter.
        public static let provider = Rules(allowsNull: true, allowsControlCharacters: true)
    }

    /// What is wrong, worded to follow "the configuration file FILE" or "the request".
    public enum Problem: Error, CustomStringConvertible, Equatable {
        case byteOrderMark
        case syntax(line: Int, column: Int, hint: String?)
        case duplicateKey(String, place: String)
        case null(path: String)
        case controlCharacter(UInt32, place: String)
        /// A number beyond a Double's range (only where a tree is read: `1e400`).
        case numberOutOfRange(path: String)

        public var description: String {
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
            case .numberOutOfRange(let path):
                return "has a number at \(path) beyond the range of a double"
            }
        }
    }

    /// Checks `bytes` against `rules`; the first problem found is thrown.
    public static func check(_ bytes: [UInt8], rules: Rules) throws(Problem) {
        _ = try read(bytes, rules: rules, building: false)
    }

    /// Checks `bytes` against `rules`, and gives their tree when `building`.
    static func read(_ bytes: [UInt8], rules: Rules, building: Bool) throws(Problem) -> JSONValue? {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { throw .byteOrderMark }
        let outcome: Result<JSONValue?, Problem> = bytes.withUnsafeBufferPointer { buffer in
            var walker = Walker(reader: JSONReader(buffer), rules: rules, building: building)
            do throws(Walker.Failure) {
                let value = try walker.value(path: [], depth: 0)
                do throws(JSONReader.Problem) { try walker.reader.end() } catch { throw .reader(error) }
                return .success(value)
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
        return try outcome.get()
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
        /// Whether the values are made (a tree), or only checked (nil).
        let building: Bool

        /// The value at the reader's position, checked, and made when `building`.
        mutating func value(path: [Step], depth: Int) throws(Failure) -> JSONValue? {
            do {
                guard depth < JSONReader.maxDepth else { throw JSONReader.Problem.syntax(reader.position) }
                switch try reader.kind() {
                case .object:
                    try reader.openObject()
                    var keys = Set<String>()
                    var members: [String: JSONValue] = [:]
                    var first = true
                    while let (range, escaped) = try reader.nextKeyRange(first: first) {
                        first = false
                        let key = try reader.decodeString(range, escaped: escaped)
                        let place = path.isEmpty ? "at the top level" : "in \(render(path))"
                        if !rules.allowsControlCharacters, let control = Self.firstControl(key) {
                            throw Failure.problem(.controlCharacter(control, place: "a key \(place)"))
                        }
                        guard keys.insert(key).inserted else { throw Failure.problem(.duplicateKey(key, place: place)) }
                        let member = try value(path: path + [.key(key)], depth: depth + 1)
                        if let member { members[key] = member }
                    }
                    return building ? .object(members) : nil
                case .array:
                    try reader.openArray()
                    var elements: [JSONValue] = []
                    var index = 0
                    while try reader.nextElement(first: index == 0) {
                        let element = try value(path: path + [.index(index)], depth: depth + 1)
                        if let element { elements.append(element) }
                        index += 1
                    }
                    return building ? .array(elements) : nil
                case .string:
                    let (range, escaped) = try reader.stringRange()
                    guard building || !rules.allowsControlCharacters else { return nil }
                    let string = try reader.decodeString(range, escaped: escaped)
                    // Escaped or not: DEL and U+0080 to U+009F need no escape in JSON.
                    if !rules.allowsControlCharacters, let control = Self.firstControl(string) {
                        throw Failure.problem(.controlCharacter(control, place: render(path)))
                    }
                    return building ? .string(string) : nil
                case .null:
                    guard rules.allowsNull else { throw Failure.problem(.null(path: render(path))) }
                    try reader.skipValue()
                    return building ? .null : nil
                case .bool:
                    let flag = try reader.readBool(render(path))
                    return building ? .bool(flag) : nil
                case .number:
                    let range = try reader.numberRange()
                    guard building else { return nil }
                    let text = String(decoding: UnsafeBufferPointer(rebasing: reader.bytes[range]), as: UTF8.self)
                    guard let number = Double(text), number.isFinite else {
                        throw Failure.problem(.numberOutOfRange(path: render(path)))
                    }
                    return .number(number)
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
