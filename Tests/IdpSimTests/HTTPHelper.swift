import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A response as the tests look at it.
struct HTTPResult: @unchecked Sendable {
    var status: Int
    var headers: [String: String]
    var body: Data

    var text: String { String(decoding: body, as: UTF8.self) }
    /// The body as a JSON object, or an empty dictionary.
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
    func string(_ key: String) -> String? { json[key] as? String }
}

/// Blocks automatic redirects so the tests see the provider's 302s and their `Location`.
final class NoRedirects: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}

/// Plain loopback HTTP with URLSession; cookies are handled by hand so each test controls its "browser".
enum HTTP {
    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        configuration.timeoutIntervalForRequest = 30
        return URLSession(configuration: configuration, delegate: NoRedirects(), delegateQueue: nil)
    }()

    static func get(_ url: String, headers: [String: String] = [:]) async throws -> HTTPResult {
        try await send("GET", url, headers: headers, body: nil)
    }

    static func postForm(_ url: String, _ parameters: [(String, String)], headers: [String: String] = [:]) async throws
        -> HTTPResult
    {
        var headers = headers
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        return try await send("POST", url, headers: headers, body: Data(formEncode(parameters).utf8))
    }

    static func postJSON(_ url: String, _ json: String) async throws -> HTTPResult {
        try await send("POST", url, headers: ["Content-Type": "application/json"], body: Data(json.utf8))
    }

    static func send(_ method: String, _ url: String, headers: [String: String], body: Data?) async throws -> HTTPResult
    {
        guard let target = URL(string: url) else { throw TestFailure("bad URL \(url)") }
        var request = URLRequest(url: target)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = body
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw TestFailure("not an HTTP response") }
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name] = value }
        }
        return HTTPResult(status: http.statusCode, headers: fields, body: data)
    }

    static func formEncode(_ parameters: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        func encode(_ value: String) -> String { value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value }
        return parameters.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&")
    }

    /// Query parameters of a URL such as a redirect `Location`.
    static func query(of url: String) -> [String: String] {
        guard let components = URLComponents(string: url) else { return [:] }
        var result: [String: String] = [:]
        for item in components.queryItems ?? [] { result[item.name] = item.value ?? "" }
        return result
    }
}

/// Decodes a JWT's payload without verifying it (verification is tested separately with JWTKit).
func jwtPayload(_ token: String) -> [String: Any] {
    let parts = token.split(separator: ".")
    guard parts.count == 3 else { return [:] }
    var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while base64.count % 4 != 0 { base64 += "=" }
    guard let data = Data(base64Encoded: base64) else { return [:] }
    return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
}
