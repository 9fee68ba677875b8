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
    /// Native SSO's device secret, when the provider issued one and the ID token's `ds_hash`
    /// binds it to ``idToken``.
    public var deviceSecret: String?
    /// The family the refresh token belongs to (Entra's `foci`): other clients of the family
    /// may redeem it.
    public var family: String?

    public init(
        accessToken: String, expiresOn: Int64, refreshToken: String?, idToken: String?,
        grantedScopes: Scopes, account: Account, deviceSecret: String? = nil, family: String? = nil
    ) {
        self.accessToken = accessToken
        self.expiresOn = expiresOn
        self.refreshToken = refreshToken
        self.idToken = idToken
        self.grantedScopes = grantedScopes
        self.account = account
        self.deviceSecret = deviceSecret
        self.family = family
    }
}

/// A credential the broker asks the provider to revoke (RFC 7009's `token` and `token_type_hint`).
public enum RevocableToken: Sendable, Equatable {
    case refreshToken(String)
    /// Native SSO's device secret: revoking it ends single sign-on for every app.
    case deviceSecret(String)

    /// Its kind as stored: `refresh_token` or `device_secret`.
    public var kind: String {
        switch self {
        case .refreshToken: "refresh_token"
        case .deviceSecret: "device_secret"
        }
    }

    /// The token itself (a secret).
    public var value: String {
        switch self {
        case .refreshToken(let value), .deviceSecret(let value): value
        }
    }

    /// A token of a stored `kind`; nil for a kind this broker does not know.
    public init?(kind: String, value: String) {
        switch kind {
        case "refresh_token": self = .refreshToken(value)
        case "device_secret": self = .deviceSecret(value)
        default: return nil
        }
    }
}

/// What an OAuth 2.0 token exchange (RFC 8693) presents as the signed-in user's token.
public enum SubjectToken: Sendable, Equatable {
    case accessToken(String)
    case refreshToken(String)
}

/// What became of a revocation request.
public enum EndpointOutcome: Sendable, Equatable {
    case done
    /// The provider's discovery document names no such endpoint.
    case notOffered
}

/// An OpenID Connect provider. Implementations throw ``BrokerFailure`` with the code that fits
/// (`.invalidPassword`, `.userNotFound`, `.interactionRequired` for a rejected refresh token,
/// `.serverUnavailable`, `.serverError`, `.unknownClient`, ...).
///
/// Each sign-in flow's part is a protocol in the flow's own file (`SignIn/`), named here once.
public protocol IdentityProvider:
    PasswordSignInProvider, EmailCodeSignInProvider, BrowserSignInProvider, DeviceCodeSignInProvider,
    PhoneApprovalSignInProvider
{
    /// The authority URL the broker was configured with.
    var authority: String { get }
    /// `claims`: an app's claims request (OpenID Connect Core 5.5: a JSON object, or the base64
    /// of a resource's claims challenge), sent with the refresh; nil for none.
    func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome

    /// RP-initiated logout: ends the provider's browser session. `.notOffered` without an end_session_endpoint.
    func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome
    /// The sign-in flows the provider offers, from its discovery document (read if not yet) and
    /// what the broker learnt of native authentication, whose endpoints discovery does not name.
    func signInFlows() async throws -> [SignInFlow]

    // Single sign-on between apps: each gets `clientId` tokens of its own for the user of an
    // earlier sign-in, without a person. A refusal (the grant is dead, the client may not use
    // it) is `.interactionRequired`; an unreachable provider is `.serverUnavailable`, as for
    // any other call.

    /// The mechanisms the provider's discovery document advertises: Native SSO and token
    /// exchange (family refresh tokens show only in token responses).
    func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism>
    /// The same, without reaching the network: nil until a call has read the discovery document.
    var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? { get }
    /// Native SSO's token exchange: the ID token and the device secret of the earlier sign-in.
    func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    /// A family refresh token, issued to another client of the family, redeemed for `clientId`.
    func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens
    /// RFC 8693: `clientId`, authenticated as itself, exchanges another app's token of the user.
    func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens
}

/// A provider that refuses every sign-in with one error (no provider is configured, none is
/// reachable): each flow's file gives it the refusal, so that it names no flow itself.
public protocol SignInRefusingProvider {
    var signInRefusal: BrokerFailure { get }
}

extension IdentityProvider {
    /// A refresh without a claims request.
    public func refresh(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens {
        try await refresh(clientId: clientId, refreshToken: refreshToken, scopes: scopes, claims: nil)
    }
}

/// Where the broker's state lives between runs.
///
/// A change is saved in two steps, so that it can be announced between them: `save` replaces
/// the state atomically (after brokerd crashes, the store holds either the old or the new
/// state, never a mix), and `sync` makes the last save durable (it survives a power loss too).
/// The broker announces a change after `save` and replies after `sync`.
///
/// `revoked`: refresh tokens the change takes out of the state that the provider revoked (RFC
/// 7009). A store that rewrites its files to take a removed secret out of them (the refresh
/// tokens `--token-storage plaintext-file` keeps) need not for these: they no longer grant
/// anything.
public protocol StateStore: Sendable {
    func load() throws -> BrokerState?
    func save(_ state: BrokerState, revoked: Set<String>) throws
    func sync() throws
}

extension StateStore {
    public func save(_ state: BrokerState) throws { try save(state, revoked: []) }
    /// For stores whose `save` is durable already (or that keep nothing on disk).
    public func sync() throws {}
}

/// What the core may ask about its callers. The outer layer knows the bus; the core only the
/// callers' names (a bus connection's unique name, never reused) and, through this, the process
/// and program behind each, as opaque texts.
public protocol CallerDirectory: Sendable {
    /// Whether `owner` is still connected. A sign-in registered after its caller left (the call
    /// was on its way when the caller's departure was handled) is ended at once.
    func isConnected(_ owner: String) async -> Bool
    /// The process and program behind `owner`, so that one process's many connections, and one
    /// program's many processes, each share one bound; empty when unknown.
    func groups(of owner: String) -> CallerGroups
}

/// Who is behind a caller besides its connection: what the limits of sign-ins group callers by.
/// Any stable text naming each; equal texts are the same process, the same program.
public struct CallerGroups: Sendable, Equatable {
    /// The process that opened the connection; nil when unknown.
    public var process: String?
    /// The program it runs (what an app is to the broker); nil when unknown.
    public var program: String?

    public init(process: String? = nil, program: String? = nil) {
        self.process = process
        self.program = program
    }
}

/// Callers as the core's tests and a bus-less broker see them: always connected, process unknown.
public struct EveryCallerConnected: CallerDirectory {
    public init() {}
    public func isConnected(_ owner: String) async -> Bool { true }
    public func groups(of owner: String) -> CallerGroups { CallerGroups() }
}

/// What the device clears after every sign-out (the administrator's `clearOnSignOut`: a
/// browser profile's cookies, the downloads), so that the next person finds none of it.
public protocol DeviceCleaner: Sendable {
    /// Whether anything is listed: with nothing, a sign-out owes no clean-up.
    var listsAnything: Bool { get }
    /// Removes what is listed; says how much it removed and could not, with a few examples.
    /// Never throws: a failure to clean never undoes a sign-out.
    func clean() async -> CleanUpReport
}

/// What one clean-up did: counts, and at most ``exampleLimit`` paths of each kind, so that a
/// reply or a signal carrying it stays small whatever the count (the full list is the
/// cleaner's log).
public struct CleanUpReport: Sendable, Equatable {
    /// The most paths of each kind a report holds.
    public static let exampleLimit = 20
    public private(set) var removedCount = 0
    public private(set) var failedCount = 0
    /// The first removed paths, at most ``exampleLimit``.
    public private(set) var removed: [String] = []
    /// The first paths (each with the reason) that could not be removed, at most ``exampleLimit``.
    public private(set) var failed: [String] = []

    public init() {}

    public mutating func noteRemoved(_ path: String) {
        removedCount += 1
        if removed.count < Self.exampleLimit { removed.append(path) }
    }

    public mutating func noteFailed(_ pathAndReason: String) {
        failedCount += 1
        if failed.count < Self.exampleLimit { failed.append(pathAndReason) }
    }
}

/// Nothing to clear.
public struct NothingToClean: DeviceCleaner {
    public init() {}
    public var listsAnything: Bool { false }
    public func clean() async -> CleanUpReport { CleanUpReport() }
}

/// The time, in unix seconds.
public protocol WallClock: Sendable {
    /// Unix seconds.
    func now() -> Int64
    /// Unix microseconds: for a deadline announced in whole seconds to be met at that second,
    /// not up to a second after it.
    func nowMicroseconds() -> Int64
}

extension WallClock {
    public func nowMicroseconds() -> Int64 { now() &* 1_000_000 }
}
