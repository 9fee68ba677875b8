import BrokerCore
import FoundationEssentials
import HTTP
import JSON
import Locking
import Logging

/// Client credentials for a confidential client; public clients (the usual case on a desktop) have none.
public struct ClientSecret: Sendable {
    public enum Method: String, Sendable {
        case basic = "client_secret_basic"
        case post = "client_secret_post"
    }
    public var secret: String
    public var method: Method
    public init(secret: String, method: Method = .basic) {
        self.secret = secret
        self.method = method
    }
}

/// An OpenID Connect provider reached over HTTP: discovery, the token endpoint, userinfo
/// and revocation, all through the project's libcurl client.
///
/// Every request goes through ``ProviderHTTP``: bounded retries with backoff and jitter where
/// they are safe (``RetryPolicy``), and one time budget per broker call. Each method of
/// ``IdentityProvider`` that talks to the provider finishes within ``RetryPolicy/budget``
/// (30 s by default); interactive sign-in's wait for the browser is not part of it, only the
/// provider exchanges before and after.
public final class OIDCProvider: IdentityProvider {
    public let authority: String
    private let parsedAuthority: Authority
    let requester: ProviderHTTP
    let clock: any WallClock
    let logger: Logger
    private let secrets: [String: ClientSecret]
    private let fallbackTenant: String
    /// Whether the resource-owner password grant may be used where native authentication is
    /// not offered (the administrator's explicit choice: RFC 9700 deprecates the grant).
    let allowPasswordGrant: Bool
    /// Declared in every request's `claims` as `xms_cc` (e.g. `cp1`: the client answers CAE's claims challenges).
    let clientCapabilities: [String]
    /// The ports a browser sign-in's redirect may use (`loopbackRedirectPorts`); nil: any the system picks.
    let loopbackRedirectPorts: ClosedRange<UInt16>?
    /// How CIBA's login_hint is formed from the username (`phoneApprovalLoginHint`).
    let phoneApprovalLoginHint: PhoneApprovalLoginHint
    let metadata: MetadataCache
    private let signingKeys: SigningKeysCache
    let nativeAuthentication = NativeAuthenticationSupport()
    let maxAgeRefusal = MaxAgeRefusal()
    /// Where sign-in and end-session pages go: the desktop portal in brokerd, a browser command otherwise.
    let urlOpener: any URLOpener
    /// Stops the HTTP client this provider's requests go through (``stop()``).
    private let stopTransport: @Sendable () async -> Void

    public convenience init(
        authority: Authority, http: HTTPClient = .shared, clock: any WallClock, logger: Logger,
        clientSecrets: [String: ClientSecret] = [:], tenantId: String = "", allowPasswordGrant: Bool = false,
        clientCapabilities: [String] = [], retryPolicy: RetryPolicy = .standard,
        urlOpener: any URLOpener = BrowserCommand(), loopbackRedirectPorts: ClosedRange<UInt16>? = nil,
        phoneApprovalLoginHint: PhoneApprovalLoginHint = .plain
    ) {
        self.init(
            authority: authority, requester: ProviderHTTP(http: http, policy: retryPolicy, logger: logger),
            clock: clock, logger: logger, clientSecrets: clientSecrets, tenantId: tenantId,
            allowPasswordGrant: allowPasswordGrant, clientCapabilities: clientCapabilities, urlOpener: urlOpener,
            loopbackRedirectPorts: loopbackRedirectPorts, phoneApprovalLoginHint: phoneApprovalLoginHint,
            stopTransport: { await http.stop() })
    }

    /// A provider whose requests go through `requester` (tests inject a transport, a clock and a sleeper).
    init(
        authority: Authority, requester: ProviderHTTP, clock: any WallClock, logger: Logger,
        clientSecrets: [String: ClientSecret] = [:], tenantId: String = "", allowPasswordGrant: Bool = false,
        clientCapabilities: [String] = [], urlOpener: any URLOpener = BrowserCommand(),
        loopbackRedirectPorts: ClosedRange<UInt16>? = nil, phoneApprovalLoginHint: PhoneApprovalLoginHint = .plain,
        stopTransport: @escaping @Sendable () async -> Void = {}
    ) {
        self.clientCapabilities = clientCapabilities
        self.loopbackRedirectPorts = loopbackRedirectPorts
        self.phoneApprovalLoginHint = phoneApprovalLoginHint
        self.stopTransport = stopTransport
        self.urlOpener = urlOpener
        self.allowPasswordGrant = allowPasswordGrant
        self.authority = authority.url
        self.parsedAuthority = authority
        self.requester = requester
        self.clock = clock
        self.logger = logger
        self.secrets = clientSecrets
        self.fallbackTenant = tenantId
        self.metadata = MetadataCache(authority: authority, requester: requester, logger: logger)
        self.signingKeys = SigningKeysCache(
            requester: requester, clock: clock, logger: logger, allowedTenant: tenantId.isEmpty ? nil : tenantId)
    }

    /// The provider's `host[:port]`, as messages name it.
    var host: String { parsedAuthority.hostAndPort }

    /// The provider's endpoints, fetched on first use and again after a failure.
    public func endpoints() async throws(IdentityError) -> ProviderMetadata {
        try await requester.withBudget { () async throws(IdentityError) -> ProviderMetadata in try await metadata.get()
        }
    }

    /// Ends every request to the provider (as cancelled) and stops its HTTP client: for a process
    /// about to exit, which would otherwise tear libcurl down under a running transfer.
    public func stop() async {
        await stopTransport()
    }

    /// `body` hears how each read of the discovery document went: nil when it was read, else why
    /// not (for the device information, which shows the last failure until a read succeeds).
    public func observeDiscovery(_ body: @escaping @Sendable (String?) -> Void) {
        metadata.observer.withLock { $0 = body }
    }

    // MARK: IdentityProvider

    /// Password and email code while native authentication may be offered (discovery lists its
    /// grant, or lists no grants and the endpoint answered as that API does), the password grant
    /// where discovery does not rule it out, the browser where discovery names an authorization
    /// endpoint, the device code and approval on a phone where it names theirs.
    public func signInFlows() async throws -> [SignInFlow] {
        let (endpoints, native) = try await requester.withBudget {
            () async throws(BrokerFailure) -> (ProviderMetadata, Bool) in
            let endpoints = try await self.endpoints(for: .other)
            return (endpoints, try await nativeAuthenticationMayBeOffered(endpoints))
        }
        return SignInFlow.allCases.filter { flow in
            switch flow {
            case .password: native || allowPasswordGrant && endpoints.mayOfferPasswordGrant
            case .emailCode: native
            case .browser: endpoints.authorizationEndpoint != nil
            case .deviceCode: endpoints.deviceAuthorizationEndpoint != nil
            case .ciba: endpoints.offersCIBAPollMode
            }
        }
    }

    /// A refresh is a one-time request: with rotation, the provider takes the refresh token once
    /// (presenting it again revokes its whole family). It is sent again only when the provider
    /// clearly did not process it (no connection, 503, 429); see ``RetryPolicy``.
    public func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    {
        let requested = try claims.map { (text: String) throws(BrokerFailure) in try ClaimsRequest.decode(text) }
        return try await requester.withBudget { () async throws(BrokerFailure) -> ProviderTokens in
            try await grant(
                .refresh, clientId: clientId, scopes: scopes, claims: requested,
                fields: [
                    ("grant_type", "refresh_token"), ("refresh_token", refreshToken),
                ])
        }
    }

    /// RFC 7009 revocation is idempotent (revoking twice is revoking once), so it is retried.
    /// A device secret is sent with the hint `device_secret`, which RFC 7009 2.1 lets a provider
    /// that does not know it ignore (it then looks the token up by itself).
    public func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome {
        try await requester.withBudget { () async throws(BrokerFailure) -> EndpointOutcome in
            let endpoints = try await endpoints(for: .other)
            guard let revocation = endpoints.revocationEndpoint else { return .notOffered }
            let (value, hint) =
                switch token {
                case .refreshToken(let value): (value, "refresh_token")
                case .deviceSecret(let value): (value, "device_secret")
                }
            var request = HTTPRequest.postForm(
                revocation,
                fields: authenticated(
                    clientId,
                    [
                        ("token", value), ("token_type_hint", hint),
                    ]))
            addBasicAuthentication(clientId, to: &request)
            let response = try await send(request, kind: .other, what: "the token revocation", replay: .idempotent)
            // RFC 7009 2.2: 200 whether or not the token was valid; anything else is an error.
            guard response.status == 200 else {
                if let refusal = revocationRefusal(response, clientId: clientId) { throw refusal }
                throw Self.oauthError(response).brokerFailure(during: .other, host: host)
            }
            return .done
        }
    }

    /// A 4xx to a revocation is the provider's answer, not its absence: asking again gets the same
    /// (a provider that lets no public client revoke answers 401, often without a body), so the
    /// broker must not keep owing it. `AccessDenied`, which the core takes as a refusal for good;
    /// 408 and 429 (an overloaded provider, thrown before this) are an outage, tried again.
    func revocationRefusal(_ response: HTTPResponse, clientId: String) -> BrokerFailure? {
        guard (400...499).contains(response.status), response.status != 408, response.status != 429 else {
            return nil
        }
        let said = OAuthErrorBody(response.body).map { ": \($0.summary)" } ?? ""
        let client = secrets[clientId] == nil ? "this public client" : "this client"
        return BrokerFailure(
            .accessDenied,
            "the identity provider at \(host) refuses to revoke tokens of \(client) (HTTP \(response.status)\(said)); "
                + "the broker does not ask again, and the token stays valid at the provider until it expires: "
                + "the provider's administrator can allow this client to revoke its tokens")
    }

    // MARK: Token endpoint

    /// Posts one grant to the token endpoint and reads the answer (RFC 6749 5.1, 5.2).
    func grant(
        _ kind: GrantKind, clientId: String, scopes: Scopes, nonce: String? = nil, claims: JSONValue? = nil,
        fields: [(String, String)]
    ) async throws(BrokerFailure) -> ProviderTokens {
        let (response, endpoints, _) = try await postGrant(
            kind, clientId: clientId, scope: scopes, claims: claims, fields: fields)
        guard response.status == 200 else { throw Self.oauthError(response).brokerFailure(during: kind, host: host) }
        do {
            return try await tokens(
                from: response, clientId: clientId, scopes: scopes, nonce: nonce, endpoints: endpoints)
        } catch {
            throw error.brokerFailure(during: kind, host: host)
        }
    }

    /// Posts one grant to the token endpoint, with `scope` when given, and returns the answer as
    /// it came, for the caller to read, with when the request was sent (the broker's clock, in
    /// microseconds: the provider issued what it answers no earlier).
    ///
    /// Every grant spends something once (a refresh token, a code, a continuation token, a device
    /// code), so what is needed to check the answer (the signing keys) is fetched first: a provider
    /// whose JWKS cannot be had fails the call before the grant is spent, not after.
    func postGrant(
        _ kind: GrantKind, clientId: String, scope: Scopes?, claims: JSONValue? = nil, fields: [(String, String)]
    ) async throws(BrokerFailure) -> (response: HTTPResponse, endpoints: ProviderMetadata, sentAt: Int64) {
        let endpoints = try await endpoints(for: kind)
        if endpoints.jwksURI != nil {
            do {
                try await signingKeys.validator(for: endpoints).jwks.prefetch()
            } catch {
                throw error.brokerFailure(during: kind, host: host)
            }
        }
        let scopeField = scope.map { [("scope", Self.scopeParameter($0, kind: kind, endpoints: endpoints))] } ?? []
        let claimsField = claimsParameter(claims).map { [("claims", $0)] } ?? []
        var request = HTTPRequest.postForm(
            endpoints.tokenEndpoint, fields: authenticated(clientId, fields + scopeField + claimsField))
        addBasicAuthentication(clientId, to: &request)
        let sentAt = clock.nowMicroseconds()
        return (try await send(request, kind: kind, what: kind.request, replay: .oneTime), endpoints, sentAt)
    }

    func tokens(
        from response: HTTPResponse, clientId: String, scopes: Scopes, nonce: String?,
        recency: AuthenticationRecency? = nil, endpoints: ProviderMetadata
    ) async throws(IdentityError) -> ProviderTokens {
        let body = try JSONValue.providerObject(response.body, what: "the token response")
        guard let accessToken = body["access_token"]?.string, !accessToken.isEmpty else {
            throw IdentityError.badResponse("the token response has no access_token")
        }
        // Tokens are kept, handed to apps and written to disk as they came: they cannot meet the
        // outside-text rule by replacement, and one it refuses (no provider issues one: RFC
        // 6749's tokens are printable ASCII) would make the state file unusable at the next
        // start. Such an answer is refused whole, before anything of it is kept.
        for name in ["access_token", "refresh_token", "id_token", "device_secret"] {
            guard let token = body[name]?.string else { continue }
            do {
                try OutsideText.check(token)
            } catch {
                throw IdentityError.badResponse("the token response's \(name) holds \(error), which no token has")
            }
        }
        guard body["token_type"]?.string?.lowercased() == "bearer" else {
            throw IdentityError.badResponse("the token response's token_type is not Bearer")
        }
        // RFC 8693 2.2.1: an exchange says what it issued; the broker asks for access tokens only.
        if let issued = body["issued_token_type"], issued.string != Self.tokenTypeAccessToken {
            throw IdentityError.badResponse(
                "the token exchange issued something other than an access token (issued_token_type)")
        }
        // RFC 6749 5.1: seconds of life. Anything beyond a year is treated as a year, so no
        // answer can overflow the expiry or keep a token cached for ever.
        let expiresIn = min(max(0, body["expires_in"]?.int64 ?? 3600), Self.maximumTokenLifetime)
        let granted = body["scope"]?.string.map { Scopes($0.split(separator: " ").map(String.init)) } ?? scopes
        let idToken = body["id_token"]?.string
        var claims: IdentityClaims
        if let idToken {
            // OpenID Connect Core 3.1.3.7: signature, issuer, audience, expiry and nonce.
            let validator = try await signingKeys.validator(for: endpoints)
            claims = try await validator.validate(idToken, clientId: clientId, expectedNonce: nonce, recency: recency)
            if !claims.namesThePerson, endpoints.userinfoEndpoint != nil {
                claims = await namesFromUserinfo(for: claims, accessToken: accessToken, endpoints: endpoints)
            }
        } else if recency != nil {
            throw IdentityError.badResponse(
                "it carries no ID token, so the broker cannot tell whether the person authenticated for this sign-in")
        } else {
            // No ID token (allowed for refresh, RFC 6749 6): ask userinfo who this is.
            claims = try await userinfo(accessToken: accessToken, endpoints: endpoints)
        }
        let refreshToken = body["refresh_token"]?.string
        return ProviderTokens(
            accessToken: accessToken, expiresOn: clock.now().addingReportingOverflow(expiresIn).partialValue,
            refreshToken: refreshToken, idToken: idToken, grantedScopes: granted,
            account: try claims.account(environment: parsedAuthority.hostAndPort, fallbackTenant: fallbackTenant),
            deviceSecret: deviceSecret(in: body, boundTo: claims, clientId: clientId),
            family: refreshToken == nil ? nil : Self.family(in: body))
    }

    private func userinfo(accessToken: String, endpoints: ProviderMetadata) async throws(IdentityError)
        -> IdentityClaims
    {
        guard let url = endpoints.userinfoEndpoint else {
            throw IdentityError.badResponse("the provider returned no ID token and offers no userinfo endpoint")
        }
        let response = try await requester.send(
            .get(url, headers: [HTTPHeader("Authorization", "Bearer \(accessToken)")]),
            what: "the userinfo request", replay: .idempotent)
        guard response.status == 200 else { throw IdentityError.badResponse("userinfo answered \(response.status)") }
        return IdentityClaims(claims: try JSONValue.providerObject(response.body, what: "the userinfo answer"))
    }

    /// An ID token that names the person only by `sub`, with the names userinfo gives: without
    /// them every app would show the provider's opaque identifier. A userinfo that fails, or
    /// describes someone else, leaves the ID token's claims as they are: the sign-in stands.
    private func namesFromUserinfo(for claims: IdentityClaims, accessToken: String, endpoints: ProviderMetadata) async
        -> IdentityClaims
    {
        do throws(IdentityError) {
            let answer = try await userinfo(accessToken: accessToken, endpoints: endpoints)
            if let filled = claims.filled(from: answer) { return filled }
            logger.warning("userinfo describes another subject than the ID token: its names are not used")
        } catch {
            logger.notice(
                "the ID token names nobody but its sub, and userinfo could not be read: the account is shown by sub",
                metadata: ["error": "\(error)"])
        }
        return claims
    }

    // MARK: Helpers

    /// The endpoints, or the broker error for a caller doing a `kind` of grant.
    func endpoints(for kind: GrantKind) async throws(BrokerFailure) -> ProviderMetadata {
        do { return try await metadata.get() } catch { throw error.brokerFailure(during: kind, host: host) }
    }

    /// Sends `request` with the retry policy; a failure becomes the broker error for a `kind` of grant.
    func send(_ request: HTTPRequest, kind: GrantKind, what: String, replay: Replay) async throws(BrokerFailure)
        -> HTTPResponse
    {
        do {
            return try await requester.send(request, what: what, replay: replay)
        } catch {
            throw error.brokerFailure(during: kind, host: host)
        }
    }

    /// Every token and authorization request's `claims`: the app's, with the configured client
    /// capabilities (`clientCapabilities`) merged in; nil when there is neither.
    func claimsParameter(_ claims: JSONValue?) -> String? {
        ClaimsRequest.parameter(claims, capabilities: clientCapabilities)
    }

    /// Adds `client_id`, and the secret for `client_secret_post` clients.
    func authenticated(_ clientId: String, _ fields: [(String, String)]) -> [(String, String)] {
        var all = [("client_id", clientId)] + fields
        if let secret = secrets[clientId], secret.method == .post { all.append(("client_secret", secret.secret)) }
        return all
    }

    /// RFC 6749 2.3.1: HTTP Basic with the form-encoded id and secret.
    func addBasicAuthentication(_ clientId: String, to request: inout HTTPRequest) {
        guard let secret = secrets[clientId], secret.method == .basic else { return }
        let pair = HTTPRequest.percentEncode(clientId) + ":" + HTTPRequest.percentEncode(secret.secret)
        request.headers.append(HTTPHeader("Authorization", "Basic " + Data(pair.utf8).base64EncodedString()))
    }

    /// The longest access-token life the broker believes: one year, in seconds.
    static let maximumTokenLifetime: Int64 = 366 * 86_400

    static func oauthError(_ response: HTTPResponse) -> IdentityError {
        guard let body = try? JSONValue.providerObject(response.body, what: "the error response"),
            let error = body["error"]?.string
        else {
            if response.status >= 500 {
                return .oauth(status: response.status, error: "server_error", description: "", codes: [], suberror: nil)
            }
            return .badResponse("HTTP \(response.status) without an OAuth error")
        }
        let codes = body["error_codes"]?.array?.compactMap { $0.int64.map(Int.init) } ?? []
        // Keep only the first line (ended by LF or, as Entra writes, CRLF): some providers append
        // trace ids and timestamps. Each text then meets the outside-text rule as it enters: it
        // ends up in a caller's error message.
        let lines = (body["error_description"]?.string ?? "").split(whereSeparator: \.isNewline)
        let description = lines.first.map(String.init) ?? ""
        return .oauth(
            status: response.status, error: OutsideText.cleaned(error),
            description: OutsideText.cleaned(String(description.prefix(300))),
            codes: codes, suberror: body["suberror"]?.string.map(OutsideText.cleaned))
    }
}

/// Whether the provider has native-authentication endpoints; learnt on first use.
actor NativeAuthenticationSupport {
    enum Known { case unknown, there, notOffered }
    private(set) var known = Known.unknown
    var mayBeOffered: Bool { known != .notOffered }
    func markNotOffered() { known = .notOffered }
    func markThere() { if known == .unknown { known = .there } }
}

/// One ID-token validator per provider, made once discovery has named the JWKS.
actor SigningKeysCache {
    private let requester: ProviderHTTP
    let clock: any WallClock
    private let logger: Logger
    private var validator: IDTokenValidator?
    private let allowedTenant: String?

    init(requester: ProviderHTTP, clock: any WallClock, logger: Logger, allowedTenant: String? = nil) {
        self.requester = requester
        self.clock = clock
        self.logger = logger
        self.allowedTenant = allowedTenant
    }

    func validator(for metadata: ProviderMetadata) throws(IdentityError) -> IDTokenValidator {
        if let validator, validator.issuer == metadata.issuer { return validator }
        guard let jwksURI = metadata.jwksURI else {
            throw IdentityError.badResponse(
                "the provider returns ID tokens but its discovery document names no jwks_uri to check them with")
        }
        let made = IDTokenValidator(
            issuer: metadata.issuer,
            jwks: JWKSCache(uri: jwksURI, requester: requester, clock: clock, logger: logger),
            clock: clock, allowedTenant: allowedTenant)
        validator = made
        return made
    }
}

/// The discovery document, fetched once and kept; a failed fetch is retried on the next use,
/// so a broker started while offline recovers by itself. Within one use, the retry policy
/// applies (discovery is a GET: 5xx, 429 and broken connections are tried again).
actor MetadataCache {
    private let authority: Authority
    private let requester: ProviderHTTP
    private let logger: Logger
    private var cached: ProviderMetadata?
    private var inFlight: Task<ProviderMetadata, any Error>?
    /// The document once read, for readers that must not wait for the actor or the network.
    nonisolated let latest = Locked<ProviderMetadata?>(nil)
    /// Told after each fetch: nil when it succeeded, else why it failed.
    nonisolated let observer = Locked<(@Sendable (String?) -> Void)?>(nil)

    init(authority: Authority, requester: ProviderHTTP, logger: Logger) {
        self.authority = authority
        self.requester = requester
        self.logger = logger
    }

    func get() async throws(IdentityError) -> ProviderMetadata {
        if let cached { return cached }
        let task = inFlight ?? Task { try await self.fetch() }
        inFlight = task
        defer { inFlight = nil }
        do {
            let metadata = try await task.value
            cached = metadata
            latest.withLock { $0 = metadata }
            observer.withLock { $0 }?(nil)
            return metadata
        } catch let error as IdentityError {
            observer.withLock { $0 }?(error.description)
            throw error
        } catch {
            observer.withLock { $0 }?("\(error)")
            throw IdentityError.badResponse("\(error)")
        }
    }

    private func fetch() async throws(IdentityError) -> ProviderMetadata {
        let response = try await requester.send(
            .get(authority.discoveryURL, headers: [HTTPHeader("Accept", "application/json")]),
            what: "the discovery document", replay: .idempotent)
        // Nothing there (400, 404, 405, 410), which no retry changes: the authority is most likely
        // not the issuer. Other 4xx (a proxy's 407, a 408, a 429) are not about the authority.
        if [400, 404, 405, 410].contains(response.status) {
            throw IdentityError.notAnIssuer(
                "the discovery document at \(authority.discoveryURL) answered HTTP \(response.status): is the "
                    + "authority the provider's issuer? (for Entra ID: https://login.microsoftonline.com/TENANT/v2.0; "
                    + "the issuer is the URL before /.well-known/openid-configuration)")
        }
        guard response.status == 200 else {
            throw IdentityError.badResponse("\(authority.discoveryURL) answered HTTP \(response.status)")
        }
        // A 200 that is not a document stays a provider's fault: a captive portal or a proxy
        // answers so too, and the authority may well be right.
        let metadata = try ProviderMetadata.parse(response.body, for: authority)
        logger.info("provider discovered", metadata: ["issuer": "\(metadata.issuer)"])
        return metadata
    }
}
