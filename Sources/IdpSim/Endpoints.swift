import Hummingbird
import Locking

/// The provider's public URLs. The issuer depends on the port actually bound, which is only
/// known once the server runs (`--port 0`), so the base URL is filled in at that moment.
final class Endpoints: Sendable {
    /// Path of the authority below the server root, e.g. `/TENANT/v2.0`.
    let authorityPath: String
    private let base = Locked<String>("")

    init(authorityPath: String) {
        self.authorityPath = authorityPath
    }

    func setBaseURL(_ url: String) {
        base.withLock { $0 = url }
    }

    var baseURL: String { base.withLock { $0 } }
    /// The issuer equals the authority, like Entra's v2.0 endpoints.
    var issuer: String { baseURL + authorityPath }

    static let discoveryPath = "/.well-known/openid-configuration"
    static let tokenPath = "/oauth2/v2.0/token"
    static let authorizePath = "/oauth2/v2.0/authorize"
    static let revokePath = "/oauth2/v2.0/revoke"
    static let logoutPath = "/oauth2/v2.0/logout"
    static let initiatePath = "/oauth2/v2.0/initiate"
    static let challengePath = "/oauth2/v2.0/challenge"
    static let jwksPath = "/discovery/v2.0/keys"
    static let userinfoPath = "/oidc/userinfo"
    /// Microsoft Graph style profile endpoint, at the server root rather than under the authority.
    static let mePath = "/v1.0/me"

    /// The router path of an endpoint that lives under the authority.
    func route(_ suffix: String) -> RouterPath { RouterPath(authorityPath + suffix) }
    /// The absolute URL of an endpoint that lives under the authority.
    func url(_ suffix: String) -> String { issuer + suffix }
}
