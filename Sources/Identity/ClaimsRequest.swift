import BrokerCore
import JSON

/// OpenID Connect's `claims` request parameter (Core 5.5) as the broker sends it: an app's
/// claims (a claims challenge from a resource, Continuous Access Evaluation's
/// `insufficient_claims`) with the configured client capabilities merged in as
/// `access_token.xms_cc`, which is how Microsoft's libraries declare `cp1`.
public enum ClaimsRequest {
    /// The largest claims an app may send, decoded.
    public static let maximumBytes = 16 * 1024

    /// The claims JSON object from what an app gave: the JSON itself, or the base64 (standard or
    /// URL-safe, padded or not) of a challenge's `claims`, as a resource sends it.
    public static func decode(_ text: String) throws(BrokerFailure) -> JSONValue {
        let trimmed = String(text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
        guard !trimmed.isEmpty, trimmed.utf8.count <= maximumBytes * 2 else {
            throw BrokerFailure(
                .invalidArgument, "claims is empty or longer than \(maximumBytes) bytes; pass the resource's challenge")
        }
        var bytes = Array(trimmed.utf8)
        if bytes.first != UInt8(ascii: "{") {
            let urlSafe = String(
                trimmed.compactMap { character -> Character? in
                    switch character {
                    case "+": "-"
                    case "/": "_"
                    case "=": nil
                    default: character
                    }
                })
            guard let decoded = Base64URL.decode(Substring(urlSafe)) else {
                throw BrokerFailure(
                    .invalidArgument, "claims is neither a JSON object nor the base64 of one (a challenge's claims)")
            }
            bytes = decoded
        }
        guard bytes.count <= maximumBytes, let value = try? JSONValue.providerObject(bytes, what: "claims"),
            case .object = value
        else {
            throw BrokerFailure(
                .invalidArgument, "claims is not a JSON object (OpenID Connect Core 5.5), nor the base64 of one")
        }
        return value
    }

    /// The `claims` parameter to send: the app's claims (nil for none) with `capabilities` added
    /// as `access_token.xms_cc`; nil when there is nothing to send.
    public static func parameter(_ claims: JSONValue?, capabilities: [String]) -> String? {
        guard claims != nil || !capabilities.isEmpty else { return nil }
        var root: [String: JSONValue] = [:]
        if case .object(let given)? = claims { root = given }
        if !capabilities.isEmpty {
            var accessToken: [String: JSONValue] = [:]
            if case .object(let given)? = root["access_token"] { accessToken = given }
            // What the app declared stays; the configured ones join it.
            var values = accessToken["xms_cc"]?["values"]?.array?.compactMap(\.string) ?? []
            values += capabilities.filter { !values.contains($0) }
            accessToken["xms_cc"] = .object(["values": .array(values.map(JSONValue.string))])
            root["access_token"] = .object(accessToken)
        }
        return JSONValue.object(root).serialized
    }
}
