import BrokerCore
import Crypto
import FoundationEssentials
import HTTP
import JSON

/// Authorization code with PKCE in the system browser (OAuth 2.0 for native apps, RFC 8252):
/// a loopback redirect on 127.0.0.1 with a port chosen per flow (or one of the administrator's
/// `loopbackRedirectPorts`, for providers that match the redirect URI exactly), `state` against forgery,
/// `nonce` bound into the ID token, S256 code challenge (RFC 7636).
extension OIDCProvider {
    /// The provider exchanges before and after the browser (discovery; the code grant) each have
    /// the call budget; the wait for the person in the browser is bounded by `request.timeout`.
    public func signInInteractively(clientId: String, scopes: Scopes, request: InteractiveRequest) async throws
        -> ProviderTokens
    {
        let endpoints = try await requester.withBudget { () async throws(BrokerFailure) -> ProviderMetadata in
            try await self.endpoints(for: .other)
        }
        guard let authorize = endpoints.authorizationEndpoint else {
            throw BrokerFailure(.notSupported, "the provider's discovery document names no authorization_endpoint")
        }
        try await checkAuthorizationEndpointAnswers(authorize)
        let claims = try request.claims.map { (text: String) throws(BrokerFailure) in try ClaimsRequest.decode(text) }
        // What the person does in the browser from here on is this sign-in's: an authentication
        // before this instant is someone else's (the ID token's auth_time is checked against it).
        let startedAt = clock.nowMicroseconds()
        // A provider that refused max_age once is not sent it again: the person would see the
        // browser open twice on every sign-in.
        let refusesMaxAge = await maxAgeRefusal.refused
        var sendsMaxAge = request.maxAge != nil && !refusesMaxAge
        while true {
            let attempt = try await authorizeInBrowser(
                clientId: clientId, scopes: scopes, request: request, endpoints: endpoints, authorize: authorize,
                claims: claims, sendsMaxAge: sendsMaxAge)
            let parameters = attempt.parameters
            // A provider may refuse max_age (legal since OpenID Connect Core's errata 2). The broker
            // checks auth_time itself, so prompt=login alone still asks the person now, and an
            // answer without a fresh authentication is still refused.
            if sendsMaxAge, parameters["error"] == "invalid_request",
                parameters["error_description"]?.lowercased().contains("max_age") == true
            {
                logger.notice(
                    """
                    the provider refuses max_age: asking again with prompt=login alone; the broker checks the ID \
                    token's auth_time itself
                    """,
                    metadata: [
                        "clientId": "\(clientId)",
                        "description":
                            "\(OutsideText.escaped(String((parameters["error_description"] ?? "").prefix(200))))",
                    ])
                sendsMaxAge = false
                await maxAgeRefusal.remember()
                continue
            }
            return try await finish(
                attempt, clientId: clientId, scopes: scopes, request: request, claims: claims,
                recency: request.maxAge.map {
                    (maxAge: $0, startedAt: startedAt, sent: sendsMaxAge)
                })
        }
    }

    /// One authorization request in the browser: the page opened, the redirect waited for.
    private func authorizeInBrowser(
        clientId: String, scopes: Scopes, request: InteractiveRequest, endpoints: ProviderMetadata, authorize: String,
        claims: JSONValue?, sendsMaxAge: Bool
    ) async throws(BrokerFailure) -> BrowserAttempt {
        let verifier = Self.randomURLSafe(bytes: 32)
        let state = Self.randomURLSafe(bytes: 16)
        let nonce = Self.randomURLSafe(bytes: 16)
        let listener: LoopbackRedirectListener
        // The listener outlives the flow's deadline a little at most, whatever becomes of the flow.
        do {
            listener = try LoopbackRedirectListener(
                expectedState: state, lifetime: request.timeout + .seconds(30), ports: loopbackRedirectPorts)
        } catch .redirectPortsTaken(let why) {
            throw BrokerFailure(.browserUnavailable, why)
        } catch {
            throw BrokerFailure(.serverError, "\(error)")
        }
        defer { listener.shutDown() }

        var query: [(String, String)] = [
            ("client_id", clientId), ("response_type", "code"), ("redirect_uri", listener.redirectURI),
            ("scope", Self.scopeParameter(scopes, kind: .signIn(.browser), endpoints: endpoints)), ("state", state),
            ("nonce", nonce),
            ("code_challenge", Base64URL.encode(Array(SHA256.hash(data: Array(verifier.utf8))))),
            ("code_challenge_method", "S256"),
        ]
        if let prompt = request.prompt { query.append(("prompt", prompt.rawValue)) }
        if sendsMaxAge, let maxAge = request.maxAge { query.append(("max_age", String(maxAge))) }
        if let hint = request.loginHint, !hint.isEmpty { query.append(("login_hint", hint)) }
        if let parameter = claimsParameter(claims) { query.append(("claims", parameter)) }
        // The browser, the portal, the app's progress and any message get the one-time local
        // address, never this URL: a command line is every local user's to read.
        let url = listener.startAddress(
            redirectingTo: authorize + (authorize.contains("?") ? "&" : "?") + HTTPRequest.formURLEncoded(query))

        // The page goes to the browser while the listener already serves: a desktop that is slow
        // to say it opened the page (or never says so) must not hold back a browser that came back.
        // One loop reports the stages, in order, whichever of the two ends first.
        let opener = urlOpener
        let timeout = request.timeout
        logger.info(
            "interactive sign-in waiting for the browser",
            metadata: ["clientId": "\(clientId)", "port": "\(listener.port)"])
        let waited: Result<[String: String], BrokerFailure> = await withTaskGroup(of: PageEvent.self) { group in
            group.addTask {
                do throws(IdentityError) {
                    try await opener.open(url)
                    return .opening(.opened)
                } catch .browserUnavailable(let why) {
                    return .opening(.unavailable(why))
                } catch {
                    return .opening(.failed(error))
                }
            }
            group.addTask {
                do throws(BrokerFailure) {
                    return .redirect(.success(try await Self.waitForRedirect(listener, timeout: timeout)))
                } catch {
                    return .redirect(.failure(error))
                }
            }
            defer { group.cancelAll() }
            var opening: PageOpening?
            while let event = await group.next() {
                switch event {
                case .opening(let outcome):
                    opening = outcome
                    switch outcome {
                    case .opened:
                        request.progress(.browserOpened, SignInProgressDetails(url: url, reason: nil))
                    case .unavailable(let why):
                        // Without a browser the page can still be opened by hand (the app is told its
                        // address), so the flow waits as usual; only its deadline's error says what went wrong.
                        logger.warning(
                            "no browser could be opened for an interactive sign-in", metadata: ["why": "\(why)"])
                        request.progress(
                            .browserUnavailable, SignInProgressDetails(url: url, reason: why))
                    case .failed(let why):
                        return .failure(why.brokerFailure(during: .signIn(.browser), host: host))
                    }
                    request.progress(.waiting, SignInProgressDetails(url: nil, reason: nil))
                case .redirect(.success(let parameters)):
                    // The browser came back before the desktop said it opened the page: it evidently did.
                    if opening == nil {
                        request.progress(.browserOpened, SignInProgressDetails(url: url, reason: nil))
                        request.progress(.waiting, SignInProgressDetails(url: nil, reason: nil))
                    }
                    return .success(parameters)
                case .redirect(.failure(let error)):
                    guard case .unavailable(let why)? = opening, error.code == .cancelled, !Task.isCancelled else {
                        return .failure(error)
                    }
                    return .failure(
                        BrokerFailure(
                            .browserUnavailable,
                            "no browser could be opened (\(why)), and the sign-in page was not opened by hand within "
                                + "\(timeout.components.seconds) s: \(url) . Install a browser or set BROWSER, or sign "
                                + "in with a device code (brokerctl sign-in --device-code)"))
                }
            }
            return .failure(BrokerFailure(.cancelled, "the interactive sign-in was cancelled"))
        }
        return BrowserAttempt(
            parameters: try waited.get(), verifier: verifier, nonce: nonce, redirectURI: listener.redirectURI)
    }

    /// The authorization response read, the code exchanged, the answer checked. An answer the
    /// broker refuses after the provider authenticated someone ends that browser session, so that
    /// the next person at the browser does not inherit it.
    private func finish(
        _ attempt: BrowserAttempt, clientId: String, scopes: Scopes, request: InteractiveRequest, claims: JSONValue?,
        recency: (maxAge: Int64, startedAt: Int64, sent: Bool)?
    ) async throws -> ProviderTokens {
        let parameters = attempt.parameters
        // Whoever reaches the loopback listener writes these (the provider, or any local page):
        // they meet the outside-text rule before they become a caller's error message.
        if let error = parameters["error"].map(OutsideText.cleaned) {
            let description =
                parameters["error_description"].map { ": \(OutsideText.cleaned(String($0.prefix(200))))" } ?? ""
            switch error {
            case "login_required", "interaction_required", "consent_required", "account_selection_required":
                throw BrokerFailure(.interactionRequired, "the provider needs the user (\(error)\(description))")
            case "access_denied":
                throw BrokerFailure(.cancelled, "the sign-in was cancelled in the browser\(description)")
            default:
                throw BrokerFailure(.serverError, "the provider ended the sign-in with \(error)\(description)")
            }
        }
        guard let code = parameters["code"], !code.isEmpty else {
            throw BrokerFailure(.serverError, "the provider's redirect carries neither a code nor an error")
        }
        request.progress(.codeReceived, SignInProgressDetails(url: nil, reason: nil))
        request.progress(.exchanging, SignInProgressDetails(url: nil, reason: nil))
        let kind = GrantKind.signIn(.browser)
        let exchange = try await requester.withBudget { () async throws(BrokerFailure) -> Exchange in
            let (response, endpoints, sentAt) = try await postGrant(
                kind, clientId: clientId, scope: scopes, claims: claims,
                fields: [
                    ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", attempt.redirectURI),
                    ("code_verifier", attempt.verifier),
                ])
            guard response.status == 200 else {
                throw Self.oauthError(response).brokerFailure(during: kind, host: host)
            }
            do throws(IdentityError) {
                return .tokens(
                    try await tokens(
                        from: response, clientId: clientId, scopes: scopes, nonce: attempt.nonce,
                        recency: recency.map {
                            AuthenticationRecency(
                                maxAge: $0.maxAge, startedAt: $0.startedAt, tokenRequestAt: sentAt,
                                maxAgeSent: $0.sent)
                        }, endpoints: endpoints))
            } catch {
                let idToken = (try? JSONValue.providerObject(response.body, what: "the token response"))?["id_token"]
                return .refused(error.brokerFailure(during: kind, host: host), idToken: idToken?.string)
            }
        }
        switch exchange {
        case .tokens(let tokens):
            return tokens
        case .refused(let failure, let idToken):
            var refused = failure
            refused.message += await endRefusedBrowserSession(clientId: clientId, idTokenHint: idToken)
            throw refused
        }
    }

    /// Ends the browser session of a sign-in the broker refused (RP-initiated logout, with the
    /// refused ID token as its hint), and says how that went, for the refusal's message.
    private func endRefusedBrowserSession(clientId: String, idTokenHint: String?) async -> String {
        do {
            switch try await endBrowserSession(clientId: clientId, idTokenHint: idTokenHint) {
            case .done:
                logger.notice(
                    "a refused sign-in's browser session ended: the provider's sign-out page was opened",
                    metadata: ["clientId": "\(clientId)"])
                return ". The provider's session in the browser was ended (its sign-out page was opened)"
            case .notOffered:
                logger.warning(
                    "a refused sign-in's browser session stays: the provider offers no end_session_endpoint",
                    metadata: ["clientId": "\(clientId)"])
                return ". The provider offers no sign-out page, so its session in the browser may still be open: "
                    + "close the browser before anyone else uses it"
            }
        } catch {
            logger.warning(
                "a refused sign-in's browser session could not be ended",
                metadata: ["clientId": "\(clientId)", "error": "\(error)"])
            return ". The provider's session in the browser could not be ended (\(error)): close the browser "
                + "before anyone else uses it"
        }
    }

    /// RP-initiated logout 1.0: opens the end_session_endpoint in the browser, so the
    /// provider forgets the browser session and the next interactive sign-in asks again.
    public func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome {
        let endpoints = try await requester.withBudget { () async throws(BrokerFailure) -> ProviderMetadata in
            try await self.endpoints(for: .other)
        }
        guard let endSession = endpoints.endSessionEndpoint else { return .notOffered }
        var query = [("client_id", clientId)]
        if let idTokenHint { query.append(("id_token_hint", idTokenHint)) }
        // The ID token must not reach a command line: the browser gets a one-time local address that
        // sends it on. The listener ends once that is served, or after the time a desktop may take
        // to ask which browser and start it.
        let listener: LoopbackRedirectListener
        do { listener = try LoopbackRedirectListener(expectedState: nil, lifetime: .seconds(120)) } catch {
            throw error.brokerFailure(during: .other, host: host)
        }
        let start = listener.startAddress(
            redirectingTo: endSession + (endSession.contains("?") ? "&" : "?") + HTTPRequest.formURLEncoded(query))
        do { try await urlOpener.open(start) } catch {
            listener.shutDown()
            throw error.brokerFailure(during: .other, host: host)
        }
        return .done
    }

    /// The redirect's parameters, or `.cancelled` when the time runs out or the task is cancelled.
    private static func waitForRedirect(_ listener: LoopbackRedirectListener, timeout: Duration)
        async throws(BrokerFailure) -> [String: String]
    {
        let outcome: [String: String]? = await withTaskGroup(of: [String: String]?.self) { group in
            group.addTask { await listener.waitForRedirect() }
            group.addTask {
                try? await Task.sleep(for: timeout)  // the flow's deadline, not a synchronization
                listener.shutDown()
                return nil
            }
            let first = await withTaskCancellationHandler {
                await group.next() ?? nil
            } onCancel: {
                listener.shutDown()
            }
            group.cancelAll()
            listener.shutDown()
            return first
        }
        guard let outcome else {
            if Task.isCancelled { throw BrokerFailure(.cancelled, "the interactive sign-in was cancelled") }
            throw BrokerFailure(
                .cancelled, "nobody finished the sign-in in the browser within \(timeout.components.seconds) s")
        }
        return outcome
    }

    /// What one authorization request in the browser brought back, and what its exchange needs.
    private struct BrowserAttempt: Sendable {
        var parameters: [String: String]
        var verifier: String
        var nonce: String
        var redirectURI: String
    }

    /// How the exchange of a code ended: tokens, or an answer the broker refused (with its ID
    /// token, if it carried one).
    private enum Exchange: Sendable {
        case tokens(ProviderTokens)
        case refused(BrokerFailure, idToken: String?)
    }

    /// How handing the sign-in page to the browser ended.
    private enum PageOpening: Sendable {
        case opened
        case unavailable(String)
        case failed(IdentityError)
    }

    /// What ends first: the page's opening, or the wait for the browser's redirect.
    private enum PageEvent: Sendable {
        case opening(PageOpening)
        case redirect(Result<[String: String], BrokerFailure>)
    }

    static func randomURLSafe(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }
}

/// Whether the provider has refused `max_age` (legal since OpenID Connect Core's errata 2, and
/// refused by some all the same), for as long as brokerd runs: later browser sign-ins then ask
/// with `prompt=login` alone from the start.
actor MaxAgeRefusal {
    private(set) var refused = false
    func remember() { refused = true }
}
