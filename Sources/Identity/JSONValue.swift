/// Provider JSON: parsed leniently into a tree, then read by field. Providers add fields
/// freely, so nothing here fails on what it does not know.
public enum JSONValue: Sendable, Equatable, Decodable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
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
