/// What a successful sign-in or token request gives the app: tokens of its own, never a refresh
/// token (those stay in the broker; ``ProviderTokens`` is what the provider answered). Apps see
/// it as the contract's result dictionary, and through the client library as its `TokenResult`.
public struct AppTokens: Sendable, Equatable {
    public var accessToken: String
    /// Unix seconds.
    public var expiresOn: Int64
    public var idToken: String?
    public var scopes: Scopes
    public var account: Account
    public var authority: String
    /// Names this request in the broker's log, so an app's report can be matched to it.
    public var correlationId: String

    public init(
        accessToken: String, expiresOn: Int64, idToken: String?, scopes: Scopes, account: Account, authority: String,
        correlationId: String
    ) {
        self.accessToken = accessToken
        self.expiresOn = expiresOn
        self.idToken = idToken
        self.scopes = scopes
        self.account = account
        self.authority = authority
        self.correlationId = correlationId
    }

    /// `Bearer <token>`, ready for an `Authorization` header.
    public var authorizationHeader: String { "Bearer \(accessToken)" }

    /// As the app gets them: the contract's `TokenResult`.
    public var result: TokenResult {
        TokenResult(
            accessToken: accessToken, expiresOn: UnixTime(seconds: expiresOn), idToken: idToken,
            scopes: scopes.values, account: account, authority: authority, correlationId: correlationId,
            authorizationHeader: authorizationHeader)
    }
}
