import Foundation
import HTTP

/// The Graph call of the tutorial (`GET {graph}/v1.0/me` with the bearer token), through the
/// project's libcurl client.
struct GraphClient: Sendable {
    /// E.g. `https://graph.microsoft.com`; idp-sim serves `/v1.0/me` at its root.
    let baseURL: String

    /// The Graph base for an authority: its scheme and host (`http://127.0.0.1:PORT/tenant/v2.0`
    /// gives `http://127.0.0.1:PORT`).
    static func baseURL(forAuthority authority: String) -> String? {
        guard let schemeEnd = authority.range(of: "://") else { return nil }
        let rest = authority[schemeEnd.upperBound...]
        let host = rest.prefix { $0 != "/" }
        return host.isEmpty ? nil : String(authority[..<schemeEnd.upperBound]) + host
    }

    /// The signed-in user's profile, as the keys the tutorial shows.
    func me(authorizationHeader: String) async throws -> [String: String] {
        let response: HTTPResponse
        do {
            response = try await HTTPClient.shared.send(.get(baseURL + "/v1.0/me", headers: [HTTPHeader("Authorization", authorizationHeader)]))
        } catch {
            throw GraphError("cannot reach \(baseURL): \(error)")
        }
        guard response.isSuccess else { throw GraphError("Graph answered \(response.status): \(response.bodyText)") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] else {
            throw GraphError("Graph answered something that is not a JSON object")
        }
        var profile: [String: String] = [:]
        for key in ["displayName", "userPrincipalName", "mail", "id"] {
            if let value = object[key] as? String { profile[key] = value }
        }
        return profile
    }
}

/// A failed Graph call.
struct GraphError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
