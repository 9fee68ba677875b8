/// What the core needs from the outside world, as protocols, so that it runs without a bus,
/// a network or a disk in its tests.

/// What an identity provider gives back for a successful grant.
public struct ProviderTokens: Sendable, Equatable {
    public var accessToken: String
    /// Unix seconds.
    public var expiresOn: Int64
    /// Absent when the provider issued none (or did not rotate it).
    public var refreshToken: String?
    public var idToken: String?
    /// What the provider says it granted (its `scope`), or what was asked when it says nothing.
    public var grantedScopes: Scopes
    /// Who signed in, from the validated ID token or, without one, from the userinfo endpoint.
    public var account: Account

    public init(accessToken: String, expiresOn: Int64, refreshToken: String?, idToken: String?,
                grantedScopes: Scopes, account: Account) {
        self.accessToken = accessToken
        self.expiresOn = expiresOn
        self.refreshToken = refreshToken
        self.idToken = idToken
        self.grantedScopes = grantedScopes
        self.account = account
    }
}

/// What became of a revocation request.
public enum RevocationOutcome: Sendable, Equatable {
    case revoked
    /// The provider offers no revocation endpoint.
    case notSupported
}

/// An OpenID Connect provider. Implementations throw ``BrokerFailure`` with the code that fits
/// (`.invalidPassword`, `.userNotFound`, `.interactionRequired` for a rejected refresh token,
/// `.serverUnavailable`, `.serverError`, `.unknownClient`, ...).
public protocol IdentityProvider: Sendable {
    /// The authority URL the broker was configured with.
    var authority: String { get }
    func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws -> ProviderTokens
    func refresh(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens
    func revoke(clientId: String, refreshToken: String) async throws -> RevocationOutcome
}

/// Where the broker's state lives between runs. `save` must be atomic: after a crash the
/// store holds either the old or the new state, never a mix.
public protocol StateStore: Sendable {
    func load() throws -> BrokerState?
    func save(_ state: BrokerState) throws
}

/// The time, in unix seconds.
public protocol WallClock: Sendable {
    func now() -> Int64
}
