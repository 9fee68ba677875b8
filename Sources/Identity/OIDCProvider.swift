import BrokerCore
import FoundationEssentials
import HTTP
import Logging

/// Client credentials for a confidential client; public clients (the usual case on a desktop) have none.
public struct ClientSecret: Sendable {
    public enum Method: String, Sendable { case basic = "client_secret_basic", post = "client_secret_post" }
    public var secret: String
    public var method: Method
    public init(secret: String, method: Method = .basic) {
        self.secret = secret
        self.method = method
    }
}

/// An OpenID Connect provider reached over HTTP: discovery, the token endpoint, userinfo
/// and revocation, all through the project's libcurl client.
public final class OIDCProvider: IdentityProvider {
    public let authority: String
    private let parsedAuthority: Authority
    private let http: HTTPClient
    private let clock: any WallClock
    let logger: Logger
    private let secrets: [String: ClientSecret]
    private let fallbackTenant: String
    private let metadata: MetadataCache
    private let signingKeys: SigningKeysCache
    let nativeAuthentication = NativeAuthenticationSupport()
    let browser = BrowserLauncher()

    public init(authority: Authority, http: HTTPClient = .shared, clock: any WallClock, logger: Logger,
                clientSecrets: [String: ClientSecret] = [:], tenantId: String = "") {
        self.authority = authority.url
        self.parsedAuthority = authority
        self.http = http
        self.clock = clock
        self.logger = logger
        self.secrets = clientSecrets
        self.fallbackTenant = tenantId
        self.metadata = MetadataCache(authority: authority, http: http, logger: logger)
        self.signingKeys = SigningKeysCache(http: http, clock: clock, logger: logger)
    }

    /// The provider's endpoints, fetched on first use and again after a failure.
    public func endpoints() async throws(IdentityError) -> ProviderMetadata {
        try await metadata.get()
    }

    // MARK: IdentityProvider

    /// Native authentication's password path where the provider offers it (remembered after
    /// the first try), the resource-owner password grant (RFC 6749 4.3) otherwise.
    public func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws -> ProviderTokens {
        if await nativeAuthentication.mayBeOffered {
            if let tokens = try await nativePasswordSignIn(clientId: clientId, username: username, password: password, scopes: scopes) {
                return tokens
            }
            await nativeAuthentication.markNotOffered()
            logger.info("the provider offers no native authentication; using the password grant")
        }
        return try await grant(.password, clientId: clientId, scopes: scopes, fields: [
            ("grant_type", "password"), ("username", username), ("password", password),
        ])
    }

    public func refresh(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens {
        try await grant(.refresh, clientId: clientId, scopes: scopes, fields: [
            ("grant_type", "refresh_token"), ("refresh_token", refreshToken),
        ])
    }

    public func revoke(clientId: String, refreshToken: String) async throws -> EndpointOutcome {
        let endpoints = try await endpoints(for: .other)
        guard let revocation = endpoints.revocationEndpoint else { return .notOffered }
        var request = HTTPRequest.postForm(revocation, fields: authenticated(clientId, [
            ("token", refreshToken), ("token_type_hint", "refresh_token"),
        ]))
        addBasicAuthentication(clientId, to: &request)
        let response = try await send(request, kind: .other)
        // RFC 7009 2.2: 200 whether or not the token was valid; anything else is an error.
        guard response.status == 200 else {
            throw Self.oauthError(response).brokerFailure(during: .other)
        }
        return .done
    }

    // MARK: Token endpoint

    /// Posts one grant to the token endpoint and reads the answer (RFC 6749 5.1, 5.2).
    func grant(_ kind: GrantKind, clientId: String, scopes: Scopes, nonce: String? = nil,
               fields: [(String, String)]) async throws(BrokerFailure) -> ProviderTokens {
        let endpoints = try await endpoints(for: kind)
        var request = HTTPRequest.postForm(endpoints.tokenEndpoint,
                                           fields: authenticated(clientId, fields + [("scope", scopes.joined)]))
        addBasicAuthentication(clientId, to: &request)
        let response = try await send(request, kind: kind)
        guard response.status == 200 else { throw Self.oauthError(response).brokerFailure(during: kind) }
        do {
            return try await tokens(from: response, clientId: clientId, scopes: scopes, nonce: nonce, endpoints: endpoints)
        } catch {
            throw error.brokerFailure(during: kind)
        }
    }

    private func tokens(from response: HTTPResponse, clientId: String, scopes: Scopes, nonce: String?,
                        endpoints: ProviderMetadata) async throws(IdentityError) -> ProviderTokens {
        let body = try JSONParsing.object(response.body, what: "the token response")
        guard let accessToken = body["access_token"]?.string, !accessToken.isEmpty else {
            throw IdentityError.badResponse("the token response has no access_token")
        }
        guard body["token_type"]?.string?.lowercased() == "bearer" else {
            throw IdentityError.badResponse("the token response's token_type is not Bearer")
        }
        let expiresIn = body["expires_in"]?.int64 ?? 3600
        let granted = body["scope"]?.string.map { Scopes($0.split(separator: " ").map(String.init)) } ?? scopes
        let idToken = body["id_token"]?.string
        let claims: IdentityClaims
        if let idToken {
            // OpenID Connect Core 3.1.3.7: signature, issuer, audience, expiry and nonce.
            let validator = try await signingKeys.validator(for: endpoints)
            claims = try await validator.validate(idToken, clientId: clientId, expectedNonce: nonce)
        } else {
            // No ID token (allowed for refresh, RFC 6749 6): ask userinfo who this is.
            claims = try await userinfo(accessToken: accessToken, endpoints: endpoints)
        }
        return ProviderTokens(
            accessToken: accessToken, expiresOn: clock.now() + max(0, expiresIn),
            refreshToken: body["refresh_token"]?.string, idToken: idToken, grantedScopes: granted,
            account: try claims.account(environment: parsedAuthority.hostAndPort, fallbackTenant: fallbackTenant))
    }

    private func userinfo(accessToken: String, endpoints: ProviderMetadata) async throws(IdentityError) -> IdentityClaims {
        guard let url = endpoints.userinfoEndpoint else {
            throw IdentityError.badResponse("the provider returned no ID token and offers no userinfo endpoint")
        }
        let response: HTTPResponse
        do {
            response = try await http.send(.get(url, headers: [HTTPHeader("Authorization", "Bearer \(accessToken)")]))
        } catch {
            throw IdentityError.unreachable(error)
        }
        guard response.status == 200 else { throw IdentityError.badResponse("userinfo answered \(response.status)") }
        return IdentityClaims(claims: try JSONParsing.object(response.body, what: "the userinfo answer"))
    }

    // MARK: Helpers

    /// The endpoints, or the broker error for a caller doing a `kind` of grant.
    func endpoints(for kind: GrantKind) async throws(BrokerFailure) -> ProviderMetadata {
        do { return try await metadata.get() } catch { throw error.brokerFailure(during: kind) }
    }

    func send(_ request: HTTPRequest, kind: GrantKind) async throws(BrokerFailure) -> HTTPResponse {
        do {
            return try await http.send(request)
        } catch .cancelled {
            throw BrokerFailure(.cancelled, "the request was cancelled")
        } catch {
            throw IdentityError.unreachable(error).brokerFailure(during: kind)
        }
    }

    /// Adds `client_id`, and the secret for `client_secret_post` clients.
    private func authenticated(_ clientId: String, _ fields: [(String, String)]) -> [(String, String)] {
        var all = [("client_id", clientId)] + fields
        if let secret = secrets[clientId], secret.method == .post { all.append(("client_secret", secret.secret)) }
        return all
    }

    /// RFC 6749 2.3.1: HTTP Basic with the form-encoded id and secret.
    private func addBasicAuthentication(_ clientId: String, to request: inout HTTPRequest) {
        guard let secret = secrets[clientId], secret.method == .basic else { return }
        let pair = HTTPRequest.percentEncode(clientId) + ":" + HTTPRequest.percentEncode(secret.secret)
        request.headers.append(HTTPHeader("Authorization", "Basic " + Data(pair.utf8).base64EncodedString()))
    }

    static func oauthError(_ response: HTTPResponse) -> IdentityError {
        guard let body = try? JSONParsing.object(response.body, what: "the error response"),
              let error = body["error"]?.string
        else {
            if response.status >= 500 { return .oauth(status: response.status, error: "server_error", description: "", codes: [], suberror: nil) }
            return .badResponse("HTTP \(response.status) without an OAuth error")
        }
        let codes = body["error_codes"]?.array?.compactMap { $0.int64.map(Int.init) } ?? []
        // Keep only the first line: some providers append trace ids and timestamps.
        let description = (body["error_description"]?.string ?? "").split(separator: "\n").first.map(String.init) ?? ""
        return .oauth(status: response.status, error: error, description: String(description.prefix(300)),
                      codes: codes, suberror: body["suberror"]?.string)
    }
}

/// Whether the provider has native-authentication endpoints; learnt on first use.
actor NativeAuthenticationSupport {
    private(set) var mayBeOffered = true
    func markNotOffered() { mayBeOffered = false }
}

/// One ID-token validator per provider, made once discovery has named the JWKS.
actor SigningKeysCache {
    private let http: HTTPClient
    private let clock: any WallClock
    private let logger: Logger
    private var validator: IDTokenValidator?

    init(http: HTTPClient, clock: any WallClock, logger: Logger) {
        self.http = http
        self.clock = clock
        self.logger = logger
    }

    func validator(for metadata: ProviderMetadata) throws(IdentityError) -> IDTokenValidator {
        if let validator, validator.issuer == metadata.issuer { return validator }
        guard let jwksURI = metadata.jwksURI else {
            throw IdentityError.badResponse("the provider returns ID tokens but its discovery document names no jwks_uri to check them with")
        }
        let made = IDTokenValidator(issuer: metadata.issuer,
                                    jwks: JWKSCache(uri: jwksURI, http: http, clock: clock, logger: logger),
                                    clock: clock)
        validator = made
        return made
    }
}

/// The discovery document, fetched once and kept; a failed fetch is retried on the next use,
/// so a broker started while offline recovers by itself.
actor MetadataCache {
    private let authority: Authority
    private let http: HTTPClient
    private let logger: Logger
    private var cached: ProviderMetadata?
    private var inFlight: Task<ProviderMetadata, any Error>?

    init(authority: Authority, http: HTTPClient, logger: Logger) {
        self.authority = authority
        self.http = http
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
            return metadata
        } catch let error as IdentityError {
            throw error
        } catch {
            throw IdentityError.badResponse("\(error)")
        }
    }

    private func fetch() async throws(IdentityError) -> ProviderMetadata {
        let response: HTTPResponse
        do {
            response = try await http.send(.get(authority.discoveryURL))
        } catch {
            throw IdentityError.unreachable(error)
        }
        guard response.status == 200 else {
            if response.status >= 500 {
                throw IdentityError.oauth(status: response.status, error: "server_error",
                                          description: "discovery answered \(response.status)", codes: [], suberror: nil)
            }
            throw IdentityError.badResponse("\(authority.discoveryURL) answered \(response.status)")
        }
        let metadata = try ProviderMetadata.parse(response.body, for: authority)
        logger.info("provider discovered", metadata: ["issuer": "\(metadata.issuer)"])
        return metadata
    }
}
