import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Decoding of `application/x-www-form-urlencoded` bodies and query strings (HTML 4.01 §17.13.4).
enum FormEncoding {
    /// Parses `a=1&b=two+words`. Returns nil when a parameter is repeated, which RFC 6749 §3.1 forbids.
    static func parse(_ text: String) -> [String: String]? {
        var result: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = decode(parts[0])
            let value = parts.count > 1 ? decode(parts[1]) : ""
            guard result[name] == nil else { return nil }
            result[name] = value
        }
        return result
    }

    static func decode(_ component: Substring) -> String {
        let spaced = component.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }

    /// Percent-encodes a value for use in a query string or form body.
    static func encode(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }

    static func encode(_ parameters: [(String, String)]) -> String {
        parameters.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&")
    }
}

/// An OAuth 2.0 / Entra style error body: `{error, error_description, error_codes, timestamp, trace_id,
/// correlation_id}`.
struct OAuthError: Error, Sendable {
    var status: HTTPResponse.Status
    var error: String
    var description: String
    var codes: [Int] = []
    var suberror: String? = nil
    var headers: HTTPFields = [:]

    static func invalidRequest(_ description: String, code: Int = 900144) -> OAuthError {
        OAuthError(status: .badRequest, error: "invalid_request", description: description, codes: [code])
    }

    static func invalidGrant(_ description: String, code: Int, suberror: String? = nil) -> OAuthError {
        OAuthError(
            status: .badRequest, error: "invalid_grant", description: description, codes: [code], suberror: suberror)
    }

    /// RFC 6749 §5.2: 401, and a `WWW-Authenticate` challenge when the client tried HTTP Basic.
    static func invalidClient(_ description: String, code: Int, usedBasic: Bool) -> OAuthError {
        var error = OAuthError(status: .unauthorized, error: "invalid_client", description: description, codes: [code])
        if usedBasic { error.headers[.wwwAuthenticate] = "Basic realm=\"idp-sim\"" }
        return error
    }

    func response() -> Response {
        let traceId = UUID().uuidString.lowercased()
        let correlationId = UUID().uuidString.lowercased()
        let timestamp = ISO8601DateFormatter().string(from: Date())
        // Entra prefixes the description with the AADSTS code and appends the ids; clients show it verbatim.
        let prefix = codes.first.map { "AADSTS\($0): " } ?? ""
        var body: [String: Any] = [
            "error": error,
            "error_description":
                "\(prefix)\(description) Trace ID: \(traceId) Correlation ID: \(correlationId) Timestamp: \(timestamp)",
            "timestamp": timestamp,
            "trace_id": traceId,
            "correlation_id": correlationId,
        ]
        if !codes.isEmpty { body["error_codes"] = codes }
        if let suberror { body["suberror"] = suberror }
        var headers = self.headers
        headers[.cacheControl] = "no-store"
        return JSONBody.response(body, status: status, headers: headers)
    }
}

/// Building JSON responses.
enum JSONBody {
    static func response(_ object: Any, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        let data =
            (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data("{}".utf8)
        return response(data: data, status: status, headers: headers)
    }

    static func response(encoding value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:])
        -> Response
    {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return response(data: data, status: status, headers: headers)
    }

    static func response(data: Data, status: HTTPResponse.Status, headers: HTTPFields) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension Request {
    /// The request body parsed as a form, or an `invalid_request` error.
    func formParameters() async throws -> [String: String] {
        if let type = headers[.contentType], !type.lowercased().hasPrefix("application/x-www-form-urlencoded") {
            throw OAuthError.invalidRequest("The request body must be application/x-www-form-urlencoded.")
        }
        let buffer = try await body.collect(upTo: 1 << 20)
        guard let parameters = FormEncoding.parse(String(buffer: buffer)) else {
            throw OAuthError.invalidRequest("A request parameter was repeated.")
        }
        return parameters
    }

    /// The query string parsed as form parameters; repeated names keep the first value.
    var queryParameters: [String: String] {
        guard let query = uri.query else { return [:] }
        var result: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = FormEncoding.decode(parts[0])
            if result[name] == nil { result[name] = parts.count > 1 ? FormEncoding.decode(parts[1]) : "" }
        }
        return result
    }

    /// The token from `Authorization: Bearer ...` (RFC 6750 §2.1).
    var bearerToken: String? {
        guard let value = headers[.authorization] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1]).trimmingCharacters(in: .whitespaces)
    }
}

extension Dictionary where Key == String, Value == String {
    /// A parameter that is present and not empty.
    func nonEmpty(_ name: String) -> String? {
        guard let value = self[name], !value.isEmpty else { return nil }
        return value
    }
}

extension HTTPFields {
    /// RFC 6749 §5.1: token responses must not be cached.
    static var noStore: HTTPFields {
        var fields: HTTPFields = [.cacheControl: "no-store"]
        if let pragma = HTTPField.Name("Pragma") { fields[pragma] = "no-cache" }
        return fields
    }
}
