import ArgumentParser
import Foundation
import Hummingbird
import Logging
import NIOCore

/// Settings taken from the command line.
struct ProviderSettings: Sendable {
    var accessTokenLifetime: Int
    var refreshTokenLifetime: Int
    var codeLifetime: Int
    /// Optional parts of OAuth and OpenID Connect this provider leaves out, like a plainer provider.
    var without: Set<OptionalFeature> = []
    /// Entra's multi-tenant authority (`/common/v2.0`), mimicked exactly (`--entra-common`).
    var multiTenant = false
    /// The device authorization grant: how long a device code lives, the polling interval the
    /// device is given, and how many polls are answered `slow_down` (for tests).
    var deviceCodeLifetime = 900
    var deviceCodeInterval = 5
    var deviceCodeSlowDowns = 0
    /// Backchannel authentication (CIBA): how long a request lives, the polling interval, and how
    /// many polls of each request are answered `slow_down` (for tests).
    var cibaLifetime = 120
    var cibaInterval = 5
    var cibaSlowDowns = 0
    /// Misbehave as a provider that ignores `prompt=login` and `max_age`: a browser session signs
    /// in again at once, with its old `auth_time` (for tests of the broker's check).
    var ignoresReauthentication = false
    /// Misbehave as a provider that lets no public client revoke: every revocation is answered
    /// 401 with no body (for tests of the broker's handling of a refusal).
    var refusesRevocation = false
    /// Answer every path it has no route for (native authentication's too, when left out) with a
    /// login page, `200 text/html`, as many web servers in front of a provider do.
    var servesLoginPageForUnknownPaths = false
    /// Compare `redirect_uri` with the registered ones exactly, port included, as many providers
    /// do instead of RFC 8252's any-port rule (`--exact-redirect-uris`).
    var exactRedirectURIs = false
    /// Misbehave the same way, but only for a browser session younger than this many seconds:
    /// a provider that takes a session just made for a fresh authentication.
    var ignoresReauthenticationWithin: Int?
    /// Misbehave as a provider that refuses `max_age` (legal, OpenID Connect Core errata 2): the
    /// authorization request is answered `invalid_request`, "max_age invalid".
    var refusesMaxAge = false
    /// What ID tokens carry as `auth_time`.
    var authTimeClaim = AuthTimeClaim.honest
    /// ID tokens without the person's names (`preferred_username`, `name`, `email`): userinfo has them.
    var namesInUserinfoOnly = false
}

/// The `auth_time` of the ID tokens idp-sim issues.
enum AuthTimeClaim: String, Sendable, CaseIterable, ExpressibleByArgument {
    /// When the person typed their credentials.
    case honest
    /// 0, as a provider with that bug sends.
    case zero
    /// None, as a provider that does not send it.
    case absent
}

/// What a standards-compliant provider may lack; the broker must work without each.
enum OptionalFeature: String, Sendable, CaseIterable, ExpressibleByArgument {
    /// RFC 7009 token revocation.
    case revocation
    /// OpenID Connect RP-initiated logout (`end_session_endpoint`).
    case endSession = "end-session"
    /// Entra's native-authentication API (initiate, challenge, the oob and continuation-token grants).
    case nativeAuth = "native-auth"
    /// OpenID Connect Native SSO for Mobile Apps 1.0: `device_sso`, device secrets, their exchange.
    case nativeSSO = "native-sso"
    /// Entra-style family refresh tokens (`foci`), redeemable by every client of the family.
    case familyTokens = "family-tokens"
    /// OAuth 2.0 Token Exchange (RFC 8693) of an access or refresh token.
    case tokenExchange = "token-exchange"
    /// The device authorization grant (RFC 8628).
    case deviceCode = "device-code"
    /// A Shared Signals Framework 1.0 transmitter (poll delivery, RFC 8936).
    case sharedSignals = "shared-signals"
    /// Continuous Access Evaluation: the `claims` request parameter, `xms_cc`, claims challenges.
    case cae
    /// Discovery's `grant_types_supported` (optional in RFC 8414; Entra's v2.0 discovery has none),
    /// so that a client learns which grants there are only by trying them.
    case grantTypes = "grant-types"
    /// OpenID Connect Client-Initiated Backchannel Authentication (CIBA) Core 1.0, poll mode, and
    /// the simulated phone that answers its requests.
    case ciba
}

/// Everything a request handler needs: the directory, keys, and the in-memory state actors.
struct Provider: Sendable {
    let users: UserStore
    let settings: ProviderSettings
    let endpoints: Endpoints
    let keys: SigningKeys
    let issuer: TokenIssuer
    let refreshTokens: RefreshTokenStore
    let stats = Stats()
    let faults = FaultInjector()
    let outbox = Outbox()
    let browserRequests = BrowserRequests()
    let nativeAuth: NativeAuthStore
    let authorization: AuthorizationStore
    let deviceSecrets: DeviceSecretStore
    let deviceCodes: DeviceCodeStore
    let backchannelRequests: BackchannelRequestStore
    let sharedSignals = SharedSignals()
    let revocations: SessionRevocations
    let claimsRequests = ClaimsRequests()
    let logger: Logger

    /// Whether an optional part is on.
    func offers(_ feature: OptionalFeature) -> Bool { !settings.without.contains(feature) }

    init(users: UserStore, settings: ProviderSettings, authorityPath: String, logger: Logger) async throws {
        self.users = users
        self.settings = settings
        self.endpoints = Endpoints(authorityPath: authorityPath, multiTenant: settings.multiTenant)
        self.keys = try await SigningKeys.generate()
        self.revocations = SessionRevocations()
        self.refreshTokens = RefreshTokenStore(lifetime: TimeInterval(settings.refreshTokenLifetime))
        self.issuer = TokenIssuer(
            keys: keys, endpoints: endpoints, tenantId: users.tenantId,
            accessTokenLifetime: settings.accessTokenLifetime, refreshTokens: refreshTokens, revocations: revocations,
            familyTokens: !settings.without.contains(.familyTokens), authTimeClaim: settings.authTimeClaim,
            namesInUserinfoOnly: settings.namesInUserinfoOnly)
        self.nativeAuth = NativeAuthStore(codeLifetime: TimeInterval(settings.codeLifetime))
        self.authorization = AuthorizationStore(codeLifetime: TimeInterval(settings.codeLifetime))
        self.deviceSecrets = DeviceSecretStore(lifetime: TimeInterval(settings.refreshTokenLifetime))
        self.deviceCodes = DeviceCodeStore(slowDowns: settings.deviceCodeSlowDowns)
        self.backchannelRequests = BackchannelRequestStore(slowDowns: settings.cibaSlowDowns)
        self.logger = logger
    }

    /// The router with every endpoint group registered.
    func router() -> Router<BasicRequestContext> {
        let router = Router()
        if settings.servesLoginPageForUnknownPaths { router.add(middleware: LoginPageForUnknownPaths()) }
        router.add(middleware: ErrorMiddleware())
        DiscoveryRoutes(provider: self).register(on: router)
        TokenRoutes(provider: self).register(on: router)
        if offers(.deviceCode) { DeviceAuthorization(provider: self).register(on: router) }
        if offers(.ciba) { BackchannelAuthentication(provider: self).register(on: router) }
        if !settings.without.contains(.revocation) { RevocationRoutes(provider: self).register(on: router) }
        ResourceRoutes(provider: self).register(on: router)
        if !settings.without.contains(.nativeAuth) { NativeAuthRoutes(provider: self).register(on: router) }
        AuthorizeRoutes(provider: self).register(on: router)
        if offers(.sharedSignals) { SharedSignalsRoutes(provider: self).register(on: router) }
        TestRoutes(provider: self).register(on: router)
        OperatorRoutes(provider: self).register(on: router)
        return router
    }
}

/// A web server's login page, `200 text/html`, for every path without a route: what a client
/// probing for an endpoint gets from a server that sends anything it does not know to sign-in.
struct LoginPageForUnknownPaths: RouterMiddleware {
    typealias Context = BasicRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound || error.status == .methodNotAllowed {
            return Response(
                status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
                body: .init(
                    byteBuffer: ByteBuffer(
                        string: "<!DOCTYPE html><html><head><title>Sign in</title></head><body><form method=\"post\" "
                            + "action=\"/login\"><input name=\"username\"><input name=\"password\" type=\"password\">"
                            + "<button>Sign in</button></form></body></html>")))
        }
    }
}

/// Turns thrown ``OAuthError``s into their JSON bodies, wherever they were thrown.
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as OAuthError {
            return error.response()
        } catch let error as SharedSignalsError {
            return error.response()
        }
    }
}
