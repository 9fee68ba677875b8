/// A D-Bus value of any type, with its full type information.
///
/// Containers carry their element signatures so that empty arrays and
/// dictionaries keep their type: `as` is `.array(elementSignature: "s", ...)`.
public enum DBusValue: Sendable, Hashable {
    /// `y`
    case byte(UInt8)
    /// `b`
    case bool(Bool)
    /// `n`
    case int16(Int16)
    /// `q`
    case uint16(UInt16)
    /// `i`
    case int32(Int32)
    /// `u`
    case uint32(UInt32)
    /// `x`
    case int64(Int64)
    /// `t`
    case uint64(UInt64)
    /// `d`
    case double(Double)
    /// `s`
    case string(String)
    /// `o`
    case objectPath(String)
    /// `g`
    case signature(String)
    /// `a<elementSignature>`; every element must have exactly `elementSignature`.
    case array(elementSignature: String, [DBusValue])
    /// `a{<keySignature><valueSignature>}`; the key must be a basic type.
    case dictionary(keySignature: String, valueSignature: String, [DBusDictEntry])
    /// `(...)`; must have at least one field.
    case structure([DBusValue])
    /// `v`
    indirect case variant(DBusValue)

    /// The full D-Bus signature of this value (a single complete type).
    public var signature: String {
        switch self {
        case .byte: return "y"
        case .bool: return "b"
        case .int16: return "n"
        case .uint16: return "q"
        case .int32: return "i"
        case .uint32: return "u"
        case .int64: return "x"
        case .uint64: return "t"
        case .double: return "d"
        case .string: return "s"
        case .objectPath: return "o"
        case .signature: return "g"
        case .array(let element, _): return "a" + element
        case .dictionary(let key, let value, _): return "a{" + key + value + "}"
        case .structure(let fields): return "(" + DBusSignature.of(fields) + ")"
        case .variant: return "v"
        }
    }
}

/// One entry of a D-Bus dictionary (`{kv}`).
public struct DBusDictEntry: Sendable, Hashable {
    /// The key; a basic type.
    public var key: DBusValue
    /// The value.
    public var value: DBusValue

    /// Creates an entry.
    public init(key: DBusValue, value: DBusValue) {
        self.key = key
        self.value = value
    }
}

// MARK: - Conveniences

extension DBusValue {
    /// An array of strings (`as`).
    public static func strings(_ values: [String]) -> DBusValue {
        .array(elementSignature: "s", values.map { .string($0) })
    }

    /// A string-to-variant dictionary (`a{sv}`); values are wrapped in variants, keys sorted.
    public static func vardict(_ values: [String: DBusValue]) -> DBusValue {
        .dictionary(
            keySignature: "s", valueSignature: "v",
            values.sorted { $0.key < $1.key }.map { DBusDictEntry(key: .string($0.key), value: .variant($0.value)) })
    }

    /// The same as ``vardict(_:)`` for entries written in ascending key order (checked in debug
    /// builds), without hashing or sorting: for replies built on every call.
    public static func vardict(inOrder entries: KeyValuePairs<String, DBusValue>) -> DBusValue {
        assert(zip(entries, entries.dropFirst()).allSatisfy { $0.key < $1.key }, "vardict(inOrder:) keys out of order")
        return .dictionary(
            keySignature: "s", valueSignature: "v",
            entries.map { DBusDictEntry(key: .string($0.key), value: .variant($0.value)) })
    }

    /// A string-to-string dictionary (`a{ss}`), keys sorted.
    public static func stringDict(_ values: [String: String]) -> DBusValue {
        .dictionary(
            keySignature: "s", valueSignature: "s",
            values.sorted { $0.key < $1.key }.map { DBusDictEntry(key: .string($0.key), value: .string($0.value)) })
    }

    /// An array of `a{sv}` dictionaries (`aa{sv}`).
    public static func vardictArray(_ values: [[String: DBusValue]]) -> DBusValue {
        .array(elementSignature: "a{sv}", values.map { vardict($0) })
    }
}

// MARK: - Accessors

extension DBusValue {
    /// The value inside any number of variant wrappers.
    public var variantValue: DBusValue {
        var value = self
        while case .variant(let inner) = value { value = inner }
        return value
    }

    /// The string of a `.string` (looking through variants).
    public var string: String? { if case .string(let v) = variantValue { return v } else { return nil } }
    /// The path of an `.objectPath` (looking through variants).
    public var objectPath: String? { if case .objectPath(let v) = variantValue { return v } else { return nil } }
    /// The value of a `.bool` (looking through variants).
    public var bool: Bool? { if case .bool(let v) = variantValue { return v } else { return nil } }
    /// The value of a `.byte` (looking through variants).
    public var byte: UInt8? { if case .byte(let v) = variantValue { return v } else { return nil } }
    /// The value of an `.int16` (looking through variants).
    public var int16: Int16? { if case .int16(let v) = variantValue { return v } else { return nil } }
    /// The value of a `.uint16` (looking through variants).
    public var uint16: UInt16? { if case .uint16(let v) = variantValue { return v } else { return nil } }
    /// The value of an `.int32` (looking through variants).
    public var int32: Int32? { if case .int32(let v) = variantValue { return v } else { return nil } }
    /// The value of a `.uint32` (looking through variants).
    public var uint32: UInt32? { if case .uint32(let v) = variantValue { return v } else { return nil } }
    /// The value of an `.int64` (looking through variants).
    public var int64: Int64? { if case .int64(let v) = variantValue { return v } else { return nil } }
    /// The value of a `.uint64` (looking through variants).
    public var uint64: UInt64? { if case .uint64(let v) = variantValue { return v } else { return nil } }
    /// The value of a `.double` (looking through variants).
    public var double: Double? { if case .double(let v) = variantValue { return v } else { return nil } }

    /// The elements of an array (looking through variants).
    public var arrayElements: [DBusValue]? {
        if case .array(_, let v) = variantValue { return v } else { return nil }
    }

    /// The fields of a structure (looking through variants).
    public var structureFields: [DBusValue]? {
        if case .structure(let v) = variantValue { return v } else { return nil }
    }

    /// The entries of a dictionary (looking through variants).
    public var dictionaryEntries: [DBusDictEntry]? {
        if case .dictionary(_, _, let v) = variantValue { return v } else { return nil }
    }

    /// The strings of an `as` (looking through variants); nil if any element is not a string.
    public var stringArray: [String]? {
        guard let elements = arrayElements else { return nil }
        var result: [String] = []
        result.reserveCapacity(elements.count)
        for element in elements {
            guard let s = element.string else { return nil }
            result.append(s)
        }
        return result
    }

    /// The entries of a string-keyed dictionary with variants unwrapped (for `a{sv}`).
    public var vardict: [String: DBusValue]? {
        guard let entries = dictionaryEntries else { return nil }
        var result: [String: DBusValue] = [:]
        for entry in entries {
            guard case .string(let key) = entry.key else { return nil }
            result[key] = entry.value.variantValue
        }
        return result
    }

    /// The entries of an `a{ss}` (looking through variants).
    public var stringDict: [String: String]? {
        guard let entries = dictionaryEntries else { return nil }
        var result: [String: String] = [:]
        for entry in entries {
            guard case .string(let key) = entry.key, let value = entry.value.string else { return nil }
            result[key] = value
        }
        return result
    }

    /// The dictionaries of an `aa{sv}` (looking through variants), variants unwrapped.
    public var vardictArray: [[String: DBusValue]]? {
        guard let elements = arrayElements else { return nil }
        var result: [[String: DBusValue]] = []
        result.reserveCapacity(elements.count)
        for element in elements {
            guard let dict = element.vardict else { return nil }
            result.append(dict)
        }
        return result
    }
}
