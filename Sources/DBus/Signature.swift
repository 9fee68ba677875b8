import CDBus

/// Helpers for D-Bus type signatures.
public enum DBusSignature {
    /// Whether `signature` is a valid signature (zero or more complete types), per libdbus.
    public static func isValid(_ signature: String) -> Bool {
        if let simple = simpleTypeCount(signature) { return simple >= 0 }
        return libdbusAccepts(signature)
    }

    /// Whether `signature` is exactly one valid complete type, per libdbus.
    public static func isSingleCompleteType(_ signature: String) -> Bool {
        if let simple = simpleTypeCount(signature) { return simple == 1 }
        return libdbusAcceptsSingle(signature)
    }

    /// The signature of `values` one after the other: a message's arguments, a structure's
    /// fields. Not `map(\.signature).joined()`: `joined` is generic over the sequence, and its
    /// first use in a process makes the Swift runtime look up `[String]`'s `Collection`
    /// conformance by searching every conformance record in the binary, which a short-lived
    /// client (brokerctl) pays on each run.
    static func of(_ values: [DBusValue]) -> String {
        var signature = ""
        for value in values { signature += value.signature }
        return signature
    }

    static func libdbusAccepts(_ signature: String) -> Bool {
        guard !signature.utf8.contains(0) else { return false }
        return signature.withCString { dbus_signature_validate($0, nil) } != 0
    }

    static func libdbusAcceptsSingle(_ signature: String) -> Bool {
        guard !signature.utf8.contains(0) else { return false }
        return signature.withCString { dbus_signature_validate_single($0, nil) } != 0
    }

    /// How many complete types `signature` holds when each is of a shape that is valid by
    /// itself: a basic type, a variant, or an array or dictionary of those (`s`, `v`, `as`,
    /// `a{sv}`, the shapes of nearly every message); nil for anything else, which libdbus
    /// checks. Every reply is checked, and libdbus's validator takes a global lock at each step
    /// of its type stack, so the common shapes are checked here.
    static func simpleTypeCount(_ signature: String) -> Int? {
        var signature = signature
        return signature.withUTF8 { simpleTypeCount($0) }
    }

    private static func simpleTypeCount(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        guard bytes.count <= 255 else { return nil }
        func at(_ index: Int) -> UInt8 { index < bytes.count ? bytes[index] : 0 }
        func isPlain(_ code: UInt8) -> Bool { isBasicCode(code) || code == UInt8(ascii: "v") }
        let array = UInt8(ascii: "a")
        let open = UInt8(ascii: "{")
        let close = UInt8(ascii: "}")
        var count = 0
        var index = 0
        while index < bytes.count {
            if isPlain(at(index)) {
                index += 1
            } else if at(index) == array, isPlain(at(index + 1)) {
                index += 2
            } else if at(index) == array, at(index + 1) == open, isBasicCode(at(index + 2)), isPlain(at(index + 3)),
                at(index + 4) == close
            {
                index += 5
            } else {
                return nil
            }
            count += 1
        }
        return count
    }

    /// The basic type codes: y b n q i u x t d h s o g.
    private static func isBasicCode(_ code: UInt8) -> Bool {
        switch code {
        case UInt8(ascii: "y"), UInt8(ascii: "b"), UInt8(ascii: "n"), UInt8(ascii: "q"), UInt8(ascii: "i"),
            UInt8(ascii: "u"), UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "h"),
            UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"):
            return true
        default:
            return false
        }
    }

    /// Whether `signature` is a single basic (non-container) type code.
    public static func isBasicType(_ signature: String) -> Bool {
        guard signature.utf8.count == 1, let c = signature.utf8.first else { return false }
        return dbus_type_is_basic(Int32(c)) != 0
    }

    /// Splits a signature into its complete types; nil if it is malformed.
    public static func completeTypes(_ signature: String) -> [String]? {
        let bytes = Array(signature.utf8)
        var result: [String] = []
        var index = 0
        while index < bytes.count {
            guard let end = endOfCompleteType(bytes, from: index) else { return nil }
            result.append(String(decoding: bytes[index..<end], as: UTF8.self))
            index = end
        }
        return result
    }

    /// Index one past the complete type starting at `start`, or nil if malformed.
    static func endOfCompleteType(_ bytes: [UInt8], from start: Int) -> Int? {
        guard start < bytes.count else { return nil }
        switch bytes[start] {
        case UInt8(ascii: "a"):
            return endOfCompleteType(bytes, from: start + 1)
        case UInt8(ascii: "("), UInt8(ascii: "{"):
            let close = bytes[start] == UInt8(ascii: "(") ? UInt8(ascii: ")") : UInt8(ascii: "}")
            var index = start + 1
            while index < bytes.count, bytes[index] != close {
                guard let end = endOfCompleteType(bytes, from: index) else { return nil }
                index = end
            }
            return index < bytes.count ? index + 1 : nil
        case UInt8(ascii: ")"), UInt8(ascii: "}"):
            return nil
        default:
            return start + 1
        }
    }
}
