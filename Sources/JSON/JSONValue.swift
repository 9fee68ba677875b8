/// A JSON document as a tree, for JSON read by field whose shape is open: a provider's answers
/// (providers add fields freely, so nothing here fails on what it does not know) and the requests
/// of Microsoft's broker protocol. Made by ``parse(_:rules:)``, the strict reader's rules (RFC
/// 8259, no key twice); numbers are Doubles, as JavaScript reads them.
public enum JSONValue: Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    /// The document in `bytes`, under `rules` (``StrictJSON/Rules``); the first problem found is thrown.
    public static func parse(_ bytes: [UInt8], rules: StrictJSON.Rules) throws(StrictJSON.Problem) -> JSONValue {
        try StrictJSON.read(bytes, rules: rules, building: true) ?? .null
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }
    public var number: Double? {
        if case .number(let value) = self { return value }
        return nil
    }
    public var int64: Int64? {
        switch self {
        case .number(let value) where value.isFinite && abs(value) < 9e15: return Int64(value)
        // Some providers send expires_in as a string; it gets the same bounds as a number.
        case .string(let value): return Int64(value).flatMap { $0.magnitude < 9_000_000_000_000_000 ? $0 : nil }
        default: return nil
        }
    }
    public var array: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }
}

extension JSONValue {
    /// Compact JSON text (RFC 8259), members in key order; a number that is an integer below
    /// 2^53 without a fraction.
    public var serialized: String {
        var writer = JSONWriter()
        write(to: &writer)
        return writer.text
    }

    private func write(to writer: inout JSONWriter) {
        switch self {
        case .string(let text): writer.string(text)
        case .number(let number):
            writer.raw(number.rounded() == number && abs(number) < 9e15 ? String(Int64(number)) : String(number))
        case .bool(let flag): writer.raw(flag ? "true" : "false")
        case .null: writer.raw("null")
        case .array(let items):
            writer.raw("[")
            for (index, item) in items.enumerated() {
                if index > 0 { writer.raw(",") }
                item.write(to: &writer)
            }
            writer.raw("]")
        case .object(let members):
            writer.raw("{")
            for (index, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { writer.raw(",") }
                writer.string(member.key)
                writer.raw(":")
                member.value.write(to: &writer)
            }
            writer.raw("}")
        }
    }
}
