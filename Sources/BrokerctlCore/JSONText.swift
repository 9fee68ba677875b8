import JSON

/// brokerctl's `--json` text: an `Encodable` value as Foundation's `JSONEncoder` writes it with
/// `.sortedKeys` and `.withoutEscapingSlashes` (and `.prettyPrinted` when `pretty`), byte for
/// byte, without Foundation.
///
/// Why not `JSONEncoder`: linking Foundation makes every start of a program slower (the dynamic
/// loader writes its pointers, page by page), and brokerctl's plain reads answer as soon as they
/// start, like `dbus-send`. Only what brokerctl prints is supported: strings, booleans, integers,
/// nil, arrays and objects. A floating-point number (a `Date` is one) is refused; a type that
/// JSONEncoder writes in a way of its own (`Data`, `URL`, `Decimal`) would come out as its
/// `Encodable` conformance says, so brokerctl prints none (the tests compare every value it prints).
public enum JSONText {
    public struct Unsupported: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    public static func encode<T: Encodable>(_ value: T, pretty: Bool) throws -> String {
        let root = Slot()
        try value.encode(to: NodeEncoder(slot: root, codingPath: []))
        guard let node = root.node else { throw Unsupported(description: "the value encoded nothing") }
        var text = ""
        write(node, pretty: pretty, indent: 0, to: &text)
        return text
    }

    // MARK: The tree an encoder builds

    /// Containers are shared by reference: a nested container is filled after it is added.
    final class Box<Value> {
        var value: Value
        init(_ value: Value) { self.value = value }
    }

    enum Node {
        case string(String)
        case literal(String)  // a number, `true`, `false` or `null`, written as it is
        case array(Box<[Slot]>)
        case object(Box<[String: Slot]>)
    }

    /// Where one value goes; empty until it is encoded.
    final class Slot {
        var node: Node?
    }

    // MARK: Writing

    private static func write(_ node: Node, pretty: Bool, indent: Int, to text: inout String) {
        switch node {
        case .string(let string): JSONWriter.append(string, to: &text)
        case .literal(let literal): text += literal
        case .array(let box):
            let items = box.value.map { $0.node ?? .object(Box([:])) }
            container("[", "]", items.count, pretty: pretty, indent: indent, to: &text) { index, text in
                write(items[index], pretty: pretty, indent: indent + 1, to: &text)
            }
        case .object(let box):
            // Code point order, as JSONEncoder's .sortedKeys.
            let keys = box.value.keys.sorted { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }
            container("{", "}", keys.count, pretty: pretty, indent: indent, to: &text) { index, text in
                JSONWriter.append(keys[index], to: &text)
                text += pretty ? " : " : ":"
                // A value that encoded nothing is an empty object, as JSONEncoder writes it.
                let node = box.value[keys[index]]?.node ?? .object(Box([:]))
                write(node, pretty: pretty, indent: indent + 1, to: &text)
            }
        }
    }

    /// `open`, the elements one per line (pretty) or side by side, `close`; an empty container
    /// pretty-printed keeps its empty line, as JSONEncoder's does.
    private static func container(
        _ open: String, _ close: String, _ count: Int, pretty: Bool, indent: Int, to text: inout String,
        element: (Int, inout String) -> Void
    ) {
        text += open
        if pretty { text += "\n" }
        for index in 0..<count {
            if index > 0 { text += pretty ? ",\n" : "," }
            if pretty { text += String(repeating: "  ", count: indent + 1) }
            element(index, &text)
        }
        if pretty { text += "\n" + String(repeating: "  ", count: indent) }
        text += close
    }

    // MARK: The encoder

    private struct NodeEncoder: Encoder {
        let slot: Slot
        let codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            KeyedEncodingContainer(KeyedContainer<Key>(object: object(), codingPath: codingPath))
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            UnkeyedContainer(array: array(), codingPath: codingPath)
        }

        func singleValueContainer() -> any SingleValueEncodingContainer {
            SingleValueContainer(slot: slot, codingPath: codingPath)
        }

        /// The object in this slot, made on first use (asking twice gives the same one).
        private func object() -> Box<[String: Slot]> {
            if case .object(let box) = slot.node { return box }
            let box = Box<[String: Slot]>([:])
            slot.node = .object(box)
            return box
        }

        private func array() -> Box<[Slot]> {
            if case .array(let box) = slot.node { return box }
            let box = Box<[Slot]>([])
            slot.node = .array(box)
            return box
        }
    }

    private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let object: Box<[String: Slot]>
        let codingPath: [any CodingKey]

        /// A new slot for `key`: a value encoded again under a key replaces the first.
        private func slot(_ key: Key) -> Slot {
            let slot = Slot()
            object.value[key.stringValue] = slot
            return slot
        }

        /// The slot of `key`, kept when there is one: a container asked for again under the same
        /// key is the same container, as JSONEncoder's.
        private func existingSlot(_ key: Key) -> Slot {
            if let slot = object.value[key.stringValue] { return slot }
            return slot(key)
        }

        mutating func encodeNil(forKey key: Key) throws { slot(key).node = .literal("null") }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            try value.encode(to: NodeEncoder(slot: slot(key), codingPath: codingPath + [key]))
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
            -> KeyedEncodingContainer<NestedKey>
        {
            NodeEncoder(slot: existingSlot(key), codingPath: codingPath + [key]).container(keyedBy: keyType)
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            NodeEncoder(slot: existingSlot(key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder {
            let slot = object.value["super"] ?? Slot()
            object.value["super"] = slot
            return NodeEncoder(slot: slot, codingPath: codingPath)
        }

        mutating func superEncoder(forKey key: Key) -> any Encoder {
            NodeEncoder(slot: existingSlot(key), codingPath: codingPath + [key])
        }
    }

    private struct UnkeyedContainer: UnkeyedEncodingContainer {
        let array: Box<[Slot]>
        let codingPath: [any CodingKey]
        var count: Int { array.value.count }

        private func next() -> Slot {
            let slot = Slot()
            array.value.append(slot)
            return slot
        }

        mutating func encodeNil() throws { next().node = .literal("null") }

        mutating func encode<T: Encodable>(_ value: T) throws {
            try value.encode(to: NodeEncoder(slot: next(), codingPath: codingPath))
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
            -> KeyedEncodingContainer<NestedKey>
        {
            NodeEncoder(slot: next(), codingPath: codingPath).container(keyedBy: keyType)
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            NodeEncoder(slot: next(), codingPath: codingPath).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder { NodeEncoder(slot: next(), codingPath: codingPath) }
    }

    private struct SingleValueContainer: SingleValueEncodingContainer {
        let slot: Slot
        let codingPath: [any CodingKey]

        mutating func encodeNil() throws { slot.node = .literal("null") }
        mutating func encode(_ value: Bool) throws { slot.node = .literal(value ? "true" : "false") }
        mutating func encode(_ value: String) throws { slot.node = .string(value) }
        mutating func encode(_ value: Int) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: Int8) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: Int16) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: Int32) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: Int64) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: UInt) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: UInt8) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: UInt16) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: UInt32) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: UInt64) throws { slot.node = .literal(String(value)) }
        mutating func encode(_ value: Double) throws { throw unsupported("a floating-point number") }
        mutating func encode(_ value: Float) throws { throw unsupported("a floating-point number") }

        mutating func encode<T: Encodable>(_ value: T) throws {
            try value.encode(to: NodeEncoder(slot: slot, codingPath: codingPath))
        }

        private func unsupported(_ what: String) -> Unsupported {
            Unsupported(description: "brokerctl's JSON has no \(what) (at \(codingPath.map(\.stringValue)))")
        }
    }
}
