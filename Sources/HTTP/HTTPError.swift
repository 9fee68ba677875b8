/// Why ``HTTPClient/send(_:)`` produced no response.
///
/// An HTTP status such as 404 or 500 is not an error: it comes back as an ``HTTPResponse``.
/// String payloads and ``description`` never contain request bodies, header values, URL
/// query strings, fragments or user information; where a request is named, it is named by
/// method and `scheme://host[:port]/path` only.
public enum HTTPError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL could not be parsed; the payload is the URL with query, fragment and user information removed, and the
    /// reason.
    case invalidURL(String)
    /// The request itself is malformed (a method or header name that is not a token, a header value with CR/LF/NUL);
    /// the payload says which part, never the value.
    case invalidRequest(String)
    /// The URL's scheme is not `http` or `https`; the payload is the scheme.
    case unsupportedScheme(String)
    /// The host name did not resolve.
    case couldNotResolve(host: String)
    /// No connection could be made; the payload names the request and libcurl's reason.
    case couldNotConnect(String)
    /// The connect timeout or the total timeout, whichever is given, expired.
    case timedOut(Duration)
    /// The response body or header block exceeded the request's `maxResponseBytes`.
    case responseTooLarge(limit: Int)
    /// TLS failed, for example the certificate did not verify; the payload names the request and libcurl's reason.
    case tls(String)
    /// Any other transfer failure; `code` is the libcurl `CURLcode`, the message names the request and libcurl's
    /// reason.
    case transport(code: Int, message: String)
    /// The calling task was cancelled; the transfer was aborted.
    case cancelled

    /// A message a person can act on. It never contains secrets.
    public var description: String {
        switch self {
        case .invalidURL(let detail):
            return "Invalid URL: \(detail)"
        case .invalidRequest(let detail):
            return "Invalid HTTP request: \(detail)"
        case .unsupportedScheme(let scheme):
            return "Unsupported URL scheme '\(scheme)': only http and https are allowed"
        case .couldNotResolve(let host):
            return "Could not resolve host '\(host)': check the host name and the DNS configuration"
        case .couldNotConnect(let detail):
            return "Could not connect: \(detail). Check that the server is running and reachable"
        case .timedOut(let duration):
            return "The HTTP request timed out after \(formatDuration(duration))"
        case .responseTooLarge(let limit):
            return "The HTTP response exceeded the limit of \(limit) bytes and was aborted"
        case .tls(let detail):
            return "TLS failure: \(detail). \(Self.tlsAdvice(detail))"
        case .transport(let code, let message):
            return "HTTP transfer failed (libcurl error \(code)): \(message)"
        case .cancelled:
            return "The HTTP request was cancelled"
        }
    }
}

extension HTTPError {
    /// What to check after a TLS failure, from libcurl's reason: a certificate that did not
    /// verify is the trust store's matter, but a server that answered plain HTTP (an https URL
    /// on an http port) is the URL's, and advice about certificates would send the person astray.
    static func tlsAdvice(_ detail: String) -> String {
        let reason = detail.lowercased()
        let plainHTTP = ["wrong version number", "packet length too long", "unexpected tls packet", "http request"]
        if plainHTTP.contains(where: reason.contains) {
            return "The server answered in plain HTTP, not TLS: use an http:// URL for it, or the port where it "
                + "serves HTTPS"
        }
        if ["certificate", "verif", "issuer", "self-signed", "self signed", "pinned"].contains(where: reason.contains) {
            return "Check the server certificate and the system trust store"
        }
        return "The TLS handshake failed: check that the server serves HTTPS on this port, with a TLS version and "
            + "ciphers the system's TLS library accepts"
    }
}

/// `1.5 s`, `250 ms`.
func formatDuration(_ duration: Duration) -> String {
    let ms = Int(clamping: milliseconds(duration, minimum: 0))
    if ms < 1000 { return "\(ms) ms" }
    let whole = ms / 1000
    let fraction = ms % 1000
    if fraction == 0 { return "\(whole) s" }
    var digits = String(fraction)
    while digits.count < 3 { digits = "0" + digits }
    while digits.hasSuffix("0") { digits.removeLast() }
    return "\(whole).\(digits) s"
}

/// Whole milliseconds in `duration`, rounded up, clamped to `minimum...Int32.max` (about 24 days,
/// safe for every libcurl timeout computation).
func milliseconds(_ duration: Duration, minimum: Int64) -> Int64 {
    let (seconds, attoseconds) = duration.components
    if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return minimum }
    let cap = Int64(Int32.max)
    if seconds >= cap / 1000 { return cap }
    var ms = seconds * 1000 + attoseconds / 1_000_000_000_000_000
    if attoseconds % 1_000_000_000_000_000 > 0 { ms += 1 }
    return max(minimum, ms)
}

/// The parts of a URL the client needs, split without libcurl.
struct URLParts {
    /// The scheme, lowercased.
    var scheme: String
    /// The host, without user information, port or IPv6 brackets.
    var host: String
    /// `scheme://host[:port]/path`: no user information, query or fragment. Safe for messages.
    var redacted: String

    /// Splits `url`; nil if it has no `scheme://` prefix.
    init?(_ url: String) {
        guard let separator = url.firstRange(of: "://") else { return nil }
        let scheme = url[..<separator.lowerBound]
        guard let first = scheme.first, first.isASCII, first.isLetter,
            scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == ".") })
        else { return nil }
        self.scheme = scheme.lowercased()
        let rest = url[separator.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            authority = authority[authority.index(after: at)...]
        }
        let pathPart = rest[authorityEnd...]
        let pathEnd = pathPart.firstIndex(where: { $0 == "?" || $0 == "#" }) ?? pathPart.endIndex
        let path = pathPart[..<pathEnd]
        var host = Substring(authority)
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") {
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: ":") {
            host = host[..<colon]
        }
        self.host = String(host)
        self.redacted = "\(self.scheme)://\(authority)\(path.isEmpty ? "/" : path)"
    }

    /// A safe rendering of any string meant to be a URL: the redacted form, or a placeholder.
    static func redact(_ url: String) -> String {
        URLParts(url)?.redacted ?? "(URL without a scheme://, not shown)"
    }
}
