// Discovery documents (ProviderMetadata.parse) for three kinds of authority, and authority URLs
// themselves (Authority.init: the --authority flag, the configuration file), with the rules
// both promise: the issuer is the authority, every endpoint is HTTPS or loopback HTTP.
import BrokerCore

@testable import Identity

private let authorities: [Authority] = [
    "https://login.example/contoso/v2.0", "http://127.0.0.1:8080/contoso/v2.0", "https://login.example",
].map { try! Authority($0) }

func fuzzOne(_ bytes: [UInt8]) {
    for authority in authorities {
        guard let metadata = try? ProviderMetadata.parse(bytes, for: authority) else { continue }
        var issuer = metadata.issuer
        while issuer.hasSuffix("/") { issuer.removeLast() }
        if issuer != authority.url { violated("a document for another issuer was accepted") }
        let endpoints = [
            metadata.tokenEndpoint, metadata.authorizationEndpoint, metadata.jwksURI,
            metadata.userinfoEndpoint, metadata.revocationEndpoint, metadata.endSessionEndpoint,
        ]
        for case let endpoint? in endpoints {
            checkSecure(endpoint, what: "an endpoint")
        }
    }
    let text = String(decoding: bytes, as: UTF8.self)
    if let authority = try? Authority(text) {
        if authority.url.hasSuffix("/") { violated("an authority URL kept its trailing slash") }
        if authority.hostAndPort.isEmpty { violated("an authority without host") }
        checkSecure(authority.url, what: "the authority")
        _ = authority.discoveryURL
    }
}

/// HTTPS, or plain HTTP to the loopback only.
private func checkSecure(_ url: String, what: String) {
    guard let host = try? Authority.checkedHost(of: url) else {
        violated(
            "\(what) \(url) passed parsing but fails "
                + "checkedHost")
    }
    if host.contains("@") { violated("\(what) has user information in its host") }
    if url.hasPrefix("https://") { return }
    guard url.hasPrefix("http://") else { violated("\(what) is neither https nor http") }
    let name = host.hasPrefix("[") ? String(host.dropFirst().prefix { $0 != "]" }) : String(host.prefix { $0 != ":" })
    if !["127.0.0.1", "localhost", "::1"].contains(name) { violated("\(what) is plain HTTP to \(name)") }
}
