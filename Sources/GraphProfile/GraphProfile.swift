import FoundationEssentials
import HTTP

/// The signed-in user's profile from a Graph-like API: `GET {base}/v1.0/me` with the bearer
/// token, the tutorial's "Call Graph". The token stays opaque here too: it is only sent.
public struct GraphProfile: Codable, Sendable, Equatable {
    public var id: String?
    public var displayName: String?
    public var userPrincipalName: String?
    public var mail: String?
    public var givenName: String?
    public var surname: String?

    /// The Graph base URL for an authority. Microsoft's sign-in hosts give Microsoft Graph;
    /// any other authority gives its own scheme and host, where idp-sim serves `/v1.0/me`
    /// (`http://127.0.0.1:PORT/tenant/v2.0` gives `http://127.0.0.1:PORT`).
    public static func baseURL(forAuthority authority: String) -> String? {
        let scheme: String
        if authority.hasPrefix("https://") {
            scheme = "https://"
        } else if authority.hasPrefix("http://") {
            scheme = "http://"
        } else {
            return nil
        }
        let host = authority.dropFirst(scheme.count).prefix { $0 != "/" }
        guard !host.isEmpty else { return nil }
        if host == "login.microsoftonline.com" || host.hasSuffix(".ciamlogin.com") {
            return "https://graph.microsoft.com"
        }
        return scheme + host
    }

    /// Fetches the profile with `authorizationHeader` (`Bearer …`, from a token result).
    public static func me(
        baseURL: String, authorizationHeader: String,
        http: HTTPClient = .shared
    ) async throws(GraphProfileError) -> GraphProfile {
        let url = baseURL + "/v1.0/me"
        let response: HTTPResponse
        do {
            response = try await http.send(.get(url, headers: [HTTPHeader("Authorization", authorizationHeader)]))
        } catch {
            throw GraphProfileError("cannot reach \(url): \(error)")
        }
        guard response.isSuccess else {
            if response.status == 401 || response.status == 403 {
                throw GraphProfileError("\(url) refused the token (\(response.status)); it needs the User.Read scope")
            }
            throw GraphProfileError("\(url) answered \(response.status)")
        }
        do {
            return try JSONDecoder().decode(GraphProfile.self, from: Data(response.body))
        } catch {
            throw GraphProfileError("\(url) answered something that is not a profile")
        }
    }
}

/// A failed profile call, in words a person can act on.
public struct GraphProfileError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
