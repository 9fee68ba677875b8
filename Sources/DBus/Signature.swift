import CDBus

/// Helpers for D-Bus type signatures.
public enum DBusSignature {
    /// Whether `signature` is a valid signature (zero or more complete types), per libdbus.
    public static func isValid(_ signature: String) -> Bool {
        guard !signature.utf8.contains(0) else { return false }
        return signature.withCString { dbus_signature_validate($0, nil) } != 0
    }

    /// Whether `signature` is exactly one valid complete type, per libdbus.
    public static func isSingleCompleteType(_ signature: String) -> Bool {
        guard !signature.utf8.contains(0) else { return false }
        return signature.withCString { dbus_signature_validate_single($0, nil) } != 0
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
