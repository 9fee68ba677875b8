import CDBus
import Glibc

/// Validation of names with libdbus's own validators, and of strings for what a Swift string can
/// hold and D-Bus refuses (NUL), so that libdbus never hits a failed precondition (which aborts
/// the process).
enum DBusValidation {
    /// Runs libdbus's validator on `s` as a C string, after making sure it has no NUL byte
    /// (which would end the C string early and hide the rest from the validator).
    private static func check(_ s: String, _ validate: (UnsafePointer<CChar>) -> dbus_bool_t) -> Bool {
        s.withCString { strlen($0) == s.utf8.count && validate($0) != 0 }
    }

    static func isValidPath(_ s: String) -> Bool { check(s) { dbus_validate_path($0, nil) } }
    static func isValidInterface(_ s: String) -> Bool { check(s) { dbus_validate_interface($0, nil) } }
    static func isValidMember(_ s: String) -> Bool { check(s) { dbus_validate_member($0, nil) } }
    static func isValidBusName(_ s: String) -> Bool { check(s) { dbus_validate_bus_name($0, nil) } }
    static func isValidErrorName(_ s: String) -> Bool { check(s) { dbus_validate_error_name($0, nil) } }
    /// No NUL byte: the one thing D-Bus refuses in a Swift string. A `String` is well-formed UTF-8
    /// by construction (every initializer validates or repairs its bytes), and that is libdbus's
    /// rule too (no surrogates, nothing past U+10FFFF; noncharacters allowed since the D-Bus
    /// specification 0.21), so its validator would only read the bytes again, as it does anyway
    /// when the string is appended: a third of the work of a token reply.
    static func isValidString(_ s: String) -> Bool { s.withCString { strlen($0) == s.utf8.count } }

    static func path(_ s: String) throws(DBusError) {
        guard isValidPath(s) else { throw .invalidArgs("Invalid object path \"\(s)\"") }
    }
    static func interface(_ s: String) throws(DBusError) {
        guard isValidInterface(s) else { throw .invalidArgs("Invalid interface name \"\(s)\"") }
    }
    static func member(_ s: String) throws(DBusError) {
        guard isValidMember(s) else { throw .invalidArgs("Invalid member name \"\(s)\"") }
    }
    static func busName(_ s: String) throws(DBusError) {
        guard isValidBusName(s) else { throw .invalidArgs("Invalid bus name \"\(s)\"") }
    }
    static func errorName(_ s: String) throws(DBusError) {
        guard isValidErrorName(s) else { throw .invalidArgs("Invalid error name \"\(s)\"") }
    }
    static func string(_ s: String) throws(DBusError) {
        guard isValidString(s) else { throw .invalidArgs("Invalid string (contains a NUL character)") }
    }

    /// Maximum container nesting accepted when sending (the wire format's total limit).
    static let maximumDepth = 64

    /// Checks that `value` can be marshalled: valid strings/paths/signatures,
    /// homogeneous arrays, basic dictionary keys, non-empty structs, bounded depth.
    static func value(_ value: DBusValue, depth: Int = 0) throws(DBusError) {
        guard depth <= maximumDepth else { throw .invalidArgs("Value nesting exceeds \(maximumDepth) levels") }
        switch value {
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double:
            return
        case .string(let s):
            try string(s)
        case .objectPath(let p):
            try path(p)
        case .signature(let g):
            guard DBusSignature.isValid(g) else { throw .invalidArgs("Invalid signature \"\(g)\"") }
        case .array(let elementSignature, let elements):
            guard DBusSignature.isSingleCompleteType("a" + elementSignature) else {
                throw .invalidArgs("Invalid array element signature \"\(elementSignature)\"")
            }
            for element in elements {
                guard element.signature == elementSignature else {
                    throw .invalidArgs(
                        "Array element of type \"\(element.signature)\" in array of \"\(elementSignature)\"")
                }
                try self.value(element, depth: depth + 1)
            }
        case .dictionary(let keySignature, let valueSignature, let entries):
            guard DBusSignature.isBasicType(keySignature),
                DBusSignature.isSingleCompleteType("a{" + keySignature + valueSignature + "}")
            else {
                throw .invalidArgs("Invalid dictionary signature \"a{\(keySignature)\(valueSignature)}\"")
            }
            for entry in entries {
                guard entry.key.signature == keySignature, entry.value.signature == valueSignature else {
                    throw .invalidArgs(
                        "Dictionary entry {\(entry.key.signature)\(entry.value.signature)} in "
                            + "a{\(keySignature)\(valueSignature)}"
                    )
                }
                try self.value(entry.key, depth: depth + 2)
                try self.value(entry.value, depth: depth + 2)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw .invalidArgs("Empty structures are not allowed") }
            for field in fields { try self.value(field, depth: depth + 1) }
        case .variant(let inner):
            guard DBusSignature.isSingleCompleteType(inner.signature) else {
                throw .invalidArgs("Variant content signature \"\(inner.signature)\" exceeds D-Bus limits")
            }
            try self.value(inner, depth: depth + 1)
        }
    }

    /// Checks a whole argument list, including the message signature limits.
    static func arguments(_ values: [DBusValue]) throws(DBusError) {
        // A call without arguments (brokerctl device-info): nothing to check.
        guard !values.isEmpty else { return }
        for v in values { try value(v) }
        let signature = DBusSignature.of(values)
        guard DBusSignature.isValid(signature) else {
            throw .invalidArgs("Argument signature \"\(signature)\" exceeds D-Bus limits")
        }
    }
}
