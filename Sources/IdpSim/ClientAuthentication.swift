import Foundation
import Hummingbird

/// Client authentication at the token and revocation endpoints (RFC 6749 §2.3).
///
/// Public clients send only `client_id`. Confidential clients (with a `clientSecret` in the users file)
/// must use `client_secret_basic` or `client_secret_post`, never both.
struct ClientAuthenticator: Sendable {
    let users: UserStore

    func authenticate(_ request: Request, _ parameters: [String: String]) throws -> ClientRegistration {
        var basicId: String?
        var basicSecret: String?
        if let header = request.headers[.authorization], header.lowercased().hasPrefix("basic ") {
            let encoded = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
            guard let data = Data(base64Encoded: encoded), let decoded = String(data: data, encoding: .utf8),
                let colon = decoded.firstIndex(of: ":")
            else {
                throw OAuthError.invalidClient(
                    "Malformed HTTP Basic client credentials.", code: 7_000_215, usedBasic: true)
            }
            // RFC 6749 §2.3.1: both parts are form-urlencoded before being joined.
            basicId = FormEncoding.decode(decoded[..<colon])
            basicSecret = FormEncoding.decode(decoded[decoded.index(after: colon)...])
        }
        let usedBasic = basicId != nil
        if usedBasic, parameters["client_secret"] != nil {
            throw OAuthError.invalidRequest("Use only one client authentication method.", code: 90014)
        }
        if let basicId, let bodyId = parameters.nonEmpty("client_id"), bodyId != basicId {
            throw OAuthError.invalidRequest("client_id does not match the HTTP Basic credentials.", code: 900144)
        }
        guard let clientId = basicId ?? parameters.nonEmpty("client_id") else {
            throw OAuthError.invalidRequest(
                "The request body must contain the following parameter: 'client_id'.", code: 900144)
        }
        guard let client = users.client(clientId) else {
            throw OAuthError.invalidClient(
                "Application with identifier '\(clientId)' was not found in the directory.", code: 700016,
                usedBasic: usedBasic)
        }
        let presented = basicSecret ?? parameters["client_secret"]
        switch (client.clientSecret, presented) {
        case (nil, nil):
            return client
        case (nil, .some):
            throw OAuthError.invalidClient(
                "Client is public so neither 'client_assertion' nor 'client_secret' should be presented.", code: 700025,
                usedBasic: usedBasic)
        case (.some, nil):
            throw OAuthError.invalidClient(
                "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.",
                code: 7_000_218, usedBasic: usedBasic)
        case (.some(let expected), .some(let given)):
            guard Self.constantTimeEqual(expected, given) else {
                throw OAuthError.invalidClient("Invalid client secret provided.", code: 7_000_215, usedBasic: usedBasic)
            }
            return client
        }
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
