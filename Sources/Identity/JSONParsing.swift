import FoundationEssentials

/// The one place provider bytes become JSON.
enum JSONParsing {
    /// Parses a JSON object, or says why it is not one.
    static func object(_ bytes: [UInt8], what: String) throws(IdentityError) -> JSONValue {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw IdentityError.badResponse("\(what) is not JSON")
        }
        guard case .object = value else { throw IdentityError.badResponse("\(what) is not a JSON object") }
        return value
    }

    /// Decodes base64url without padding (RFC 7515, appendix C).
    static func base64URLDecode(_ text: Substring) -> [UInt8]? {
        var base64 = String(text).replacing("-", with: "+").replacing("_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64).map { [UInt8]($0) }
    }
}
