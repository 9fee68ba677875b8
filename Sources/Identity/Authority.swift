/// An OpenID Connect authority URL, checked once: HTTPS, or plain HTTP on the loopback only.
public struct Authority: Sendable, Hashable, CustomStringConvertible {
    /// The URL without a trailing slash, e.g. `https://login.example/tenant/v2.0`.
    public let url: String
    /// `host[:port]`, the account's `environment`.
    public let hostAndPort: String

    /// - Throws: ``IdentityError/insecureURL`` or ``IdentityError/invalidURL``.
    public init(_ string: String) throws(IdentityError) {
        var trimmed = string
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.hostAndPort = try Self.checkedHost(of: trimmed)
        self.url = trimmed
    }

    /// The discovery document's address (OpenID Connect Discovery 1.0, section 4).
    public var discoveryURL: String { url + "/.well-known/openid-configuration" }

    public var description: String { url }

    /// Checks that `url` is absolute HTTPS, or HTTP to the loopback, and returns its `host[:port]`.
    static func checkedHost(of url: String) throws(IdentityError) -> String {
        let scheme: String
        if url.hasPrefix("https://") {
            scheme = "https"
        } else if url.hasPrefix("http://") {
            scheme = "http"
        } else {
            throw IdentityError.invalidURL(redacted(url))
        }
        let rest = url.dropFirst(scheme.count + 3)
        let hostPort = String(rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" })
        if hostPort.isEmpty || hostPort.contains("@") { throw IdentityError.invalidURL(redacted(url)) }
        if scheme == "http" {
            let host: Substring
            if hostPort.hasPrefix("[") {
                host = hostPort.prefix { $0 != "]" }.dropFirst()
            } else {
                host = hostPort.prefix { $0 != ":" }
            }
            guard host == "127.0.0.1" || host == "localhost" || host == "::1" else {
                throw IdentityError.insecureURL(redacted(url))
            }
        }
        return hostPort
    }

    /// The URL without its query and fragment, for messages.
    static func redacted(_ url: String) -> String {
        String(url.prefix { $0 != "?" && $0 != "#" })
    }
}
