/// One HTTP header field: a name and a value.
///
/// Names compare exactly as stored; ``HTTPResponse`` stores them lowercased.
public struct HTTPHeader: Sendable, Hashable {
    /// The field name, for example `Content-Type`.
    public var name: String
    /// The field value. It may carry secrets (an `Authorization` value); it never appears in errors.
    public var value: String

    /// Creates a header field.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Creates a header field from a name and a value.
    public init(_ name: String, _ value: String) {
        self.init(name: name, value: value)
    }
}

/// An HTTP request to be sent with ``HTTPClient/send(_:)``.
public struct HTTPRequest: Sendable {
    /// The request method, for example `"GET"` or `"POST"`. Must be an HTTP token.
    public var method: String
    /// The absolute `http://` or `https://` URL.
    public var url: String
    /// Request header fields, sent in order after the ones the client adds (`User-Agent`, `Host`).
    public var headers: [HTTPHeader]
    /// The request body; sent when it is not empty, and always for `POST`, `PUT` and `PATCH`.
    public var body: [UInt8]
    /// The longest time allowed for name resolution plus connection set-up (TCP and TLS). Default 5 s.
    public var connectTimeout: Duration
    /// The longest time allowed for the whole transfer. Default 15 s.
    public var timeout: Duration
    /// The largest response body accepted; a larger one fails with ``HTTPError/responseTooLarge(limit:)``.
    /// The response header block is bounded by the same number. Default 1 MiB.
    public var maxResponseBytes: Int

    /// The default connect timeout: 5 seconds.
    public static let defaultConnectTimeout: Duration = .seconds(5)
    /// The default total timeout: 15 seconds.
    public static let defaultTimeout: Duration = .seconds(15)
    /// The default response size limit: 1 MiB.
    public static let defaultMaxResponseBytes = 1 << 20

    /// Creates a request.
    public init(
        method: String = "GET",
        url: String,
        headers: [HTTPHeader] = [],
        body: [UInt8] = [],
        connectTimeout: Duration = HTTPRequest.defaultConnectTimeout,
        timeout: Duration = HTTPRequest.defaultTimeout,
        maxResponseBytes: Int = HTTPRequest.defaultMaxResponseBytes
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.maxResponseBytes = maxResponseBytes
    }

    /// A `GET` request for `url`.
    public static func get(_ url: String, headers: [HTTPHeader] = []) -> HTTPRequest {
        HTTPRequest(method: "GET", url: url, headers: headers)
    }

    /// A `POST` request whose body is `fields` encoded as `application/x-www-form-urlencoded`
    /// (see ``formURLEncoded(_:)``). A `Content-Type` header is added unless `headers` has one.
    public static func postForm(_ url: String, fields: [(String, String)], headers: [HTTPHeader] = []) -> HTTPRequest {
        var all = headers
        if !all.contains(where: { $0.name.lowercased() == "content-type" }) {
            all.insert(HTTPHeader("Content-Type", "application/x-www-form-urlencoded"), at: 0)
        }
        return HTTPRequest(method: "POST", url: url, headers: all, body: Array(formURLEncoded(fields).utf8))
    }

    /// Encodes `fields` as `name=value` pairs joined by `&`, each side percent-encoded
    /// with ``percentEncode(_:)``. Order is kept; a space becomes `%20`, not `+`.
    public static func formURLEncoded(_ fields: [(String, String)]) -> String {
        var out = ""
        for (index, field) in fields.enumerated() {
            if index > 0 { out += "&" }
            out += percentEncode(field.0)
            out += "="
            out += percentEncode(field.1)
        }
        return out
    }

    /// Percent-encodes the UTF-8 bytes of `string` as RFC 3986 says: every byte except the
    /// unreserved characters `A-Z a-z 0-9 - . _ ~` becomes `%XX` with upper-case hex digits.
    /// Usable for form bodies and for query components.
    public static func percentEncode(_ string: String) -> String {
        let hex: [UInt8] = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(string.utf8.count)
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                bytes.append(byte)
            default:
                bytes.append(UInt8(ascii: "%"))
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0x0F)])
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A complete HTTP response. Any status, including 4xx and 5xx, is a response, not an error.
public struct HTTPResponse: Sendable {
    /// The status code of the final response, for example 200 or 404.
    public var status: Int
    /// The header fields of the final response, in the order received, names lowercased.
    public var headers: [HTTPHeader]
    /// The response body, at most the request's `maxResponseBytes` long.
    public var body: [UInt8]
    /// The URL libcurl reports as used (the request URL, as redirects are never followed).
    public var effectiveURL: String
    /// The time the whole transfer took, as measured by libcurl.
    public var totalTime: Duration

    /// Creates a response; useful for test doubles of code that consumes responses.
    public init(
        status: Int, headers: [HTTPHeader] = [], body: [UInt8] = [], effectiveURL: String = "",
        totalTime: Duration = .zero
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.effectiveURL = effectiveURL
        self.totalTime = totalTime
    }

    /// The value of the first header field called `name`, compared case-insensitively, or nil.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first(where: { $0.name.lowercased() == wanted })?.value
    }

    /// The body decoded as UTF-8; invalid sequences become U+FFFD.
    public var bodyText: String {
        String(decoding: body, as: UTF8.self)
    }

    /// Whether the status is in the 2xx range.
    public var isSuccess: Bool {
        (200..<300).contains(status)
    }
}
