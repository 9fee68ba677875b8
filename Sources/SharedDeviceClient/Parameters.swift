/// What ``PublicClientApplication/acquireTokenSilent(_:)`` needs (MSAL: `MSALSilentTokenParameters`).
public struct SilentTokenParameters: Sendable {
    /// The scopes to ask for (`openid profile offline_access` are always added).
    public var scopes: [String]
    /// Whose token; nil means the signed-in account.
    public var account: Account?
    /// Skip the cache and use the refresh token.
    public var forceRefresh: Bool
    /// A resource's claims challenge (MSAL: `claimsRequest`): the `claims` of its
    /// `WWW-Authenticate: Bearer error="insufficient_claims"` answer, as it came, or the JSON.
    public var claims: String?
    /// Creates the parameters.
    public init(scopes: [String], account: Account? = nil, forceRefresh: Bool = false, claims: String? = nil) {
        self.scopes = scopes
        self.account = account
        self.forceRefresh = forceRefresh
        self.claims = claims
    }
}

/// What ``PublicClientApplication/acquireToken(_:)`` needs (MSAL: `MSALInteractiveTokenParameters`).
/// There are no webview parameters: the broker opens the system browser itself.
public struct InteractiveTokenParameters: Sendable {
    /// What the provider's sign-in page should ask for (MSAL: `MSALPromptType`).
    public enum PromptType: String, Sendable, CaseIterable {
        /// Let the person pick an account (the tutorial's choice).
        case selectAccount = "select_account"
        /// Ask for credentials even when a browser session exists.
        case login
        /// Ask for consent again.
        case consent
        /// Never show a page: fails with interaction required when one would be needed.
        case none
    }
    /// The scopes to ask for.
    public var scopes: [String]
    /// What the sign-in page asks for.
    public var promptType: PromptType
    /// The username to suggest, if any.
    public var loginHint: String?
    /// Told each stage the sign-in reaches, the first with the sign-in page's address (for
    /// "Continue in your browser", or to open it by hand).
    public var progress: (@Sendable (SignInProgress) -> Void)?
    /// Creates the parameters.
    public init(
        scopes: [String], promptType: PromptType = .selectAccount, loginHint: String? = nil,
        progress: (@Sendable (SignInProgress) -> Void)? = nil
    ) {
        self.scopes = scopes
        self.promptType = promptType
        self.loginHint = loginHint
        self.progress = progress
    }
}

/// What ``PublicClientApplication/signOut(account:parameters:)`` needs (MSAL: `MSALSignoutParameters`).
public struct SignoutParameters: Sendable {
    /// Also end the provider's browser session, so the next interactive sign-in asks again.
    /// Set it on a shared device.
    public var signoutFromBrowser: Bool
    /// Creates the parameters.
    public init(signoutFromBrowser: Bool = false) { self.signoutFromBrowser = signoutFromBrowser }
}
