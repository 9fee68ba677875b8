import Hummingbird
import Locking

/// The provider's public URLs. The issuer depends on the port actually bound, which is only
/// known once the server runs (`--port 0`), so the base URL is filled in at that moment.
final class Endpoints: Sendable {
    /// Path of the authority below the server root, e.g. `/TENANT/v2.0`.
    let authorityPath: String
    /// Path the endpoints live under: the authority's, or for Entra's multi-tenant authority
    /// `/common` (`/common/oauth2/v2.0/token` beside `/common/v2.0/.well-known/...`).
    let endpointPath: String
    /// Entra's multi-tenant authority: discovery gives the issuer as a template,
    /// `{base}/{tenantid}/v2.0`, and each token's issuer names the user's own tenant.
    let multiTenant: Bool
    private let base = Locked<String>("")

    init(authorityPath: String, multiTenant: Bool = false) {
        self.authorityPath = authorityPath
        self.multiTenant = multiTenant
        endpointPath = multiTenant ? String(authorityPath.dropLast("/v2.0".count)) : authorityPath
    }

    /// The multi-tenant authority's path, as Entra names it.
    static let commonAuthorityPath = "/common/v2.0"

    func setBaseURL(_ url: String) {
        base.withLock { $0 = url }
    }

    var baseURL: String { base.withLock { $0 } }
    /// What discovery gives as the issuer: the authority, like Entra's v2.0 endpoints for one
    /// tenant, or the template of Entra's multi-tenant authority.
    var issuer: String { multiTenant ? baseURL + "/{tenantid}/v2.0" : baseURL + authorityPath }

    /// The issuer of a token for a user of `tenant`.
    func issuer(forTenant tenant: String) -> String {
        multiTenant ? baseURL + "/\(tenant)/v2.0" : issuer
    }

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

    /// The router path of discovery, under the authority.
    var discoveryRoute: RouterPath { RouterPath(authorityPath + Self.discoveryPath) }
    /// The router path of an endpoint that lives under the authority.
    func route(_ suffix: String) -> RouterPath { RouterPath(endpointPath + suffix) }
    /// The absolute URL of an endpoint that lives under the authority.
    func url(_ suffix: String) -> String { baseURL + endpointPath + suffix }
}
