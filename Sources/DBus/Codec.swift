import CDBus

/// Marshalling between `DBusValue` and libdbus message iterators.
/// Encoding expects values already checked by `DBusValidation`.
enum DBusCodec {
    /// Appends `values` to `message`; false only when libdbus is out of memory.
    static func append(_ values: [DBusValue], to message: OpaquePointer) -> Bool {
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for value in values {
            guard append(value, to: &iter) else { return false }
        }
        return true
    }

    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) -> Bool {
        switch value {
        case .byte(let v): return cdbus_iter_append_byte(&iter, v) != 0
        case .bool(let v): return cdbus_iter_append_bool(&iter, v ? 1 : 0) != 0
        case .int16(let v): return cdbus_iter_append_int16(&iter, v) != 0
        case .uint16(let v): return cdbus_iter_append_uint16(&iter, v) != 0
        case .int32(let v): return cdbus_iter_append_int32(&iter, v) != 0
        case .uint32(let v): return cdbus_iter_append_uint32(&iter, v) != 0
        case .int64(let v): return cdbus_iter_append_int64(&iter, v) != 0
        case .uint64(let v): return cdbus_iter_append_uint64(&iter, v) != 0
        case .double(let v): return cdbus_iter_append_double(&iter, v) != 0
        case .string(let v): return v.withCString { cdbus_iter_append_string(&iter, $0) } != 0
        case .objectPath(let v): return v.withCString { cdbus_iter_append_object_path(&iter, $0) } != 0
        case .signature(let v): return v.withCString { cdbus_iter_append_signature(&iter, $0) } != 0
        case .array(let elementSignature, let elements):
            return container(Int32(CDBUS_TYPE_ARRAY), elementSignature, &iter) { sub in
                for element in elements where !append(element, to: &sub) { return false }
                return true
            }
        case .dictionary(let keySignature, let valueSignature, let entries):
            return container(Int32(CDBUS_TYPE_ARRAY), "{" + keySignature + valueSignature + "}", &iter) { sub in
                for entry in entries {
                    let ok = container(Int32(CDBUS_TYPE_DICT_ENTRY), nil, &sub) { pair in
                        append(entry.key, to: &pair) && append(entry.value, to: &pair)
                    }
                    if !ok { return false }
                }
                return true
            }
        case .structure(let fields):
            return container(Int32(CDBUS_TYPE_STRUCT), nil, &iter) { sub in
                for field in fields where !append(field, to: &sub) { return false }
                return true
            }
        case .variant(let inner):
            return container(Int32(CDBUS_TYPE_VARIANT), inner.signature, &iter) { sub in
                append(inner, to: &sub)
            }
        }
    }

    private static func container(
        _ type: Int32, _ signature: String?, _ iter: inout DBusMessageIter,
        _ body: (inout DBusMessageIter) -> Bool
    ) -> Bool {
        var sub = DBusMessageIter()
        let opened: dbus_bool_t
        if let signature {
            opened = signature.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) }
        } else {
            opened = dbus_message_iter_open_container(&iter, type, nil, &sub)
        }
        guard opened != 0 else { return false }
        guard body(&sub) else {
            dbus_message_iter_abandon_container(&iter, &sub)
            return false
        }
        return dbus_message_iter_close_container(&iter, &sub) != 0
    }

    // MARK: Decoding

    /// Decodes all arguments of `message`. Strings are copied out.
    static func decodeArguments(_ message: OpaquePointer) throws(DBusError) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return [] }
        return try decodeAll(&iter)
    }

    private static func decodeAll(_ iter: inout DBusMessageIter) throws(DBusError) -> [DBusValue] {
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != Int32(CDBUS_TYPE_INVALID) {
            values.append(try decode(&iter))
            dbus_message_iter_next(&iter)
        }
        return values
    }

    private static func string(_ iter: inout DBusMessageIter) -> String {
        guard let p = cdbus_iter_get_string(&iter) else { return "" }
        return String(cString: p)
    }

    private static func currentSignature(_ iter: inout DBusMessageIter) -> String {
        guard let p = dbus_message_iter_get_signature(&iter) else { return "" }
        defer { dbus_free(p) }
        return String(cString: p)
    }

    private static func decode(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case Int32(CDBUS_TYPE_BYTE): return .byte(cdbus_iter_get_byte(&iter))
        case Int32(CDBUS_TYPE_BOOLEAN): return .bool(cdbus_iter_get_bool(&iter) != 0)
        case Int32(CDBUS_TYPE_INT16): return .int16(cdbus_iter_get_int16(&iter))
        case Int32(CDBUS_TYPE_UINT16): return .uint16(cdbus_iter_get_uint16(&iter))
        case Int32(CDBUS_TYPE_INT32): return .int32(cdbus_iter_get_int32(&iter))
        case Int32(CDBUS_TYPE_UINT32): return .uint32(cdbus_iter_get_uint32(&iter))
        case Int32(CDBUS_TYPE_INT64): return .int64(cdbus_iter_get_int64(&iter))
        case Int32(CDBUS_TYPE_UINT64): return .uint64(cdbus_iter_get_uint64(&iter))
        case Int32(CDBUS_TYPE_DOUBLE): return .double(cdbus_iter_get_double(&iter))
        case Int32(CDBUS_TYPE_STRING): return .string(string(&iter))
        case Int32(CDBUS_TYPE_OBJECT_PATH): return .objectPath(string(&iter))
        case Int32(CDBUS_TYPE_SIGNATURE): return .signature(string(&iter))
        case Int32(CDBUS_TYPE_UNIX_FD):
            throw .notSupported("Unix file descriptors are not supported")
        case Int32(CDBUS_TYPE_VARIANT):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(try decode(&sub))
        case Int32(CDBUS_TYPE_STRUCT):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .structure(try decodeAll(&sub))
        case Int32(CDBUS_TYPE_ARRAY):
            let signature = currentSignature(&iter)  // "a..." of this array
            let elementSignature = String(signature.dropFirst())
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if dbus_message_iter_get_element_type(&iter) == Int32(CDBUS_TYPE_DICT_ENTRY) {
                // elementSignature is "{kv}"
                let inner = String(elementSignature.dropFirst().dropLast())
                guard let parts = DBusSignature.completeTypes(inner), parts.count == 2 else {
                    throw .invalidArgs("Malformed dictionary signature \"\(signature)\"")
                }
                var entries: [DBusDictEntry] = []
                while dbus_message_iter_get_arg_type(&sub) == Int32(CDBUS_TYPE_DICT_ENTRY) {
                    var pair = DBusMessageIter()
                    dbus_message_iter_recurse(&sub, &pair)
                    let key = try decode(&pair)
                    dbus_message_iter_next(&pair)
                    let value = try decode(&pair)
                    entries.append(DBusDictEntry(key: key, value: value))
                    dbus_message_iter_next(&sub)
                }
                return .dictionary(keySignature: parts[0], valueSignature: parts[1], entries)
            }
            return .array(elementSignature: elementSignature, try decodeAll(&sub))
        default:
            throw .invalidArgs("Unsupported D-Bus type code \(type)")
        }
    }
}
