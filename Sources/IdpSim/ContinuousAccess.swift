import Foundation
import Hummingbird

/// Continuous Access Evaluation as Entra does it: a client declares that it can answer claims
/// challenges (`xms_cc` capability `cp1` in the OIDC `claims` request parameter), its access
/// tokens say so, and a resource then refuses such a token issued before its user's sessions were
/// revoked with a claims challenge instead of honouring it until it expires.
enum ContinuousAccess {
    /// The client capabilities idp-sim knows: `cp1`, "can handle claims challenges".
    static let knownCapabilities: Set<String> = ["cp1"]

    /// A `claims` parameter (OIDC Core §5.5), checked.
    struct Request: Sendable {
        /// The parameter as the client sent it (JSON text), kept for tests.
        var text: String
        /// The declared capabilities idp-sim knows, as the access token's `xms_cc` lists them.
        var capabilities: [String]
    }

    /// Parses a `claims` parameter: a JSON object, or `invalid_request`.
    static func parse(_ text: String) throws -> Request {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw OAuthError.invalidRequest("The claims parameter is not a valid JSON object.", code: 90100)
        }
        let request = (object["access_token"] as? [String: Any])?["xms_cc"] as? [String: Any]
        var values = request?["values"] as? [String] ?? []
        if let value = request?["value"] as? String { values.append(value) }
        return Request(text: text, capabilities: values.filter(knownCapabilities.contains).sorted())
    }

    /// Entra's claims challenge (RFC 6750 with `insufficient_claims`): the client must get a token
    /// issued after `revokedAt`, asking for it with the base64 `claims` it names.
    static func challenge(authorizationURI: String, revokedAt: Date) -> OAuthError {
        let claims = #"{"access_token":{"nbf":{"essential":true,"value":"\#(Int(revokedAt.timeIntervalSince1970))"}}}"#
        let encoded = Data(claims.utf8).base64EncodedString()
        var error = OAuthError(
            status: .unauthorized, error: "insufficient_claims",
            description: "Continuous access evaluation resulted in challenge with result: InteractionRequired "
                + "and code: TokensRevoked")
        error.headers[.wwwAuthenticate] =
            "Bearer realm=\"\", authorization_uri=\"\(authorizationURI)\", error=\"insufficient_claims\", "
            + "claims=\"\(encoded)\""
        return error
    }
}

/// The last `claims` parameter each client sent to the token endpoint, for tests.
actor ClaimsRequests {
    private var last: [String: String] = [:]

    func record(_ text: String, clientId: String) {
        last[clientId] = text
    }

    func last(clientId: String) -> String? { last[clientId] }
}
