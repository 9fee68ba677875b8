import FoundationEssentials

/// The one place provider bytes become JSON.
enum JSONParsing {
    /// Parses a JSON object, or says why it is not one.
    static func object(_ bytes: [UInt8], what: String) throws(IdentityError) -> JSONValue {
        let value = try self.value(bytes, what: what)
        guard case .object = value else { throw IdentityError.badResponse("\(what) is not a JSON object") }
        return value
    }

    /// Parses any JSON value (an object or an array, where a standard allows either).
    static func value(_ bytes: [UInt8], what: String) throws(IdentityError) -> JSONValue {
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw IdentityError.badResponse("\(what) is not JSON")
        }
    }
}
