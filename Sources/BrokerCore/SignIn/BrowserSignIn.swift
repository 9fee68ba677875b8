/// The browser sign-in (`AcquireTokenInteractive`): the authorization code grant with PKCE in
/// the system browser, its answer at a loopback redirect (RFC 8252).

/// What the provider does for it.
public protocol BrowserSignInProvider: Sendable {
    /// Authorization code with PKCE in the system browser, with a loopback redirect (RFC 8252).
    func signInInteractively(clientId: String, scopes: Scopes, request: InteractiveRequest) async throws
        -> ProviderTokens
}

extension BrowserSignInProvider where Self: SignInRefusingProvider {
    public func signInInteractively(clientId: String, scopes: Scopes, request: InteractiveRequest) async throws
        -> ProviderTokens
    { throw signInRefusal }
}

/// OpenID Connect's `prompt` for interactive sign-in.
public enum Prompt: String, Sendable, CaseIterable {
    case selectAccount = "select_account"
    case login
    case consent
    case none
}

/// What interactive sign-in needs besides the client and scopes.
public struct InteractiveRequest: Sendable {
    public var prompt: Prompt?
    public var loginHint: String?
    /// OpenID Connect's `max_age`: the provider must have authenticated the person at most this
    /// many seconds before the request, and the ID token's `auth_time` must show it. 0 (shared
    /// mode) means "now": a browser session left behind by someone else cannot sign anyone in.
    public var maxAge: Int64?
    /// An app's claims request (a claims challenge), sent as the authorization request's `claims`.
    public var claims: String?
    /// How long a person has to finish in the browser.
    public var timeout: Duration
    /// Told each stage the sign-in reaches, with its details (the page's `url`).
    public var progress: @Sendable (SignInStage, SignInProgressDetails) -> Void

    public init(
        prompt: Prompt? = nil, loginHint: String? = nil, maxAge: Int64? = nil, claims: String? = nil,
        timeout: Duration, progress: @escaping @Sendable (SignInStage, SignInProgressDetails) -> Void = { _, _ in }
    ) {
        self.claims = claims
        self.prompt = prompt
        self.loginHint = loginHint
        self.maxAge = maxAge
        self.timeout = timeout
        self.progress = progress
    }
}

/// A browser sign-in waiting for the person.
struct PendingBrowserSignIn: PendingSignIn {
    static let flow = SignInFlow.browser
    var cancel: @Sendable () -> Void
    /// The call that started it waits for it, until the configured timeout.
    var expiresAt: Int64? { nil }
    func stop() { cancel() }
}

extension Broker {
    /// Interactive sign-in in the system browser. `flowId` (chosen by the caller, may be
    /// empty) lets ``cancelSignIn(flowId:owner:)`` end it.
    public func acquireTokenInteractive(
        clientId: String, scopes requested: [String], prompt: Prompt?, loginHint: String?,
        flowId: String, owner: String, claims: String? = nil
    ) async throws(BrokerFailure) -> AppTokens {
        try checkClient(clientId)
        try InputRules.scopes(requested)
        if !flowId.isEmpty { try InputRules.flowId(flowId) }
        if let loginHint, !loginHint.isEmpty { try InputRules.username(loginHint) }
        let shared = configuration.deviceMode == .shared
        if shared, prompt == Prompt.none {
            // Shared mode asks the person at the device to sign in every time (see below), which
            // is the interaction prompt=none rules out: said now, before a page opens.
            throw BrokerFailure(
                .interactionRequired,
                "prompt=none asks for a sign-in without interaction, but on a shared device every interactive "
                    + "sign-in asks the person at the device for their credentials: use AcquireTokenSilent for the "
                    + "device's account, or call AcquireTokenInteractive without prompt=none when a person may sign in")
        }
        // The browser is the next person's from the moment its page opens (cookies, downloads):
        // the last sign-out's clean-up, which may empty its profile, ends first.
        if shared { await cleanUpOwed() }
        try checkTokenStorage()
        try admitFlow(owner: owner)
        let scopes = signInScopes(requested, clientId: clientId)
        let startGeneration = generation
        let correlationId = Self.newCorrelationId()
        let id = flowId.isEmpty ? correlationId : flowId
        // Someone is signed in for this app (the device's account in shared mode): that is the
        // account to sign in, so the provider is given it and shows no account picker.
        let holder = account(for: clientId)
        let hint = loginHint.flatMap { $0.isEmpty ? nil : $0 } ?? holder?.username
        let announce = announcer
        // Shared mode: the person at the device must prove who they are now. The browser may still
        // hold the provider's session of the last person (a sign-out need not have ended it), and
        // a provider that is only asked to sign someone in would sign that person in again.
        let request = InteractiveRequest(
            prompt: shared ? .login : (holder != nil && prompt == .selectAccount ? nil : prompt), loginHint: hint,
            maxAge: shared ? 0 : nil, claims: claims, timeout: configuration.interactiveTimeout,
            progress: { stage, details in
                let report = SignInProgressReport(owner: owner, flowId: id, stage: stage, details: details)
                announce([.signInProgress(report)])
            })
        try flows.checkFree(id, owner: owner)
        let task = Task {
            try await self.provider.signInInteractively(clientId: clientId, scopes: scopes, request: request)
        }
        // Free a moment ago, on this actor, with no await since: the add cannot be refused.
        try? flows.add(PendingBrowserSignIn(cancel: { task.cancel() }), id: id, owner: owner)
        logger.info(
            "interactive sign-in started",
            metadata: [
                "clientId": "\(clientId)", "flowId": "\(id)",
                "correlationId": "\(correlationId)",
            ])
        defer { flows.remove(id, owner: owner) }
        try await endIfCallerLeft(owner)
        // The flow runs in a task of its own (CancelSignIn and the caller leaving cancel it);
        // cancelling this call, as brokerd does when it stops, cancels it too.
        let tokens = try await callProvider(correlationId) {
            try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        }
        return try await adoptSignIn(
            tokens, clientId: clientId, scopes: scopes, correlationId: correlationId,
            startGeneration: startGeneration)
    }
}
