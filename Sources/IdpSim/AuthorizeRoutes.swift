import Crypto
import Foundation
import Hummingbird

/// The browser flow: `GET/POST {authority}/oauth2/v2.0/authorize` (RFC 6749 §4.1 with PKCE, RFC 7636),
/// the `authorization_code` grant, and `GET {authority}/oauth2/v2.0/logout` (OIDC RP-Initiated Logout).
///
/// Native apps may only use loopback redirect URIs (RFC 8252 §7.3), with any port.
struct AuthorizeRoutes: Sendable {
    let provider: Provider

    static let sessionCookie = "idpsim_session"

    func register(on router: Router<BasicRequestContext>) {
        let endpoints = provider.endpoints
        router.get(endpoints.route(Endpoints.authorizePath)) { request, _ in
            // A request without a client is no sign-in page: brokerd asks one to learn that the
            // provider answers before it opens a browser.
            let isSignInPage = request.uri.queryParameters["client_id"] != nil
            await provider.stats.count(isSignInPage ? "authorize" : "authorize_check")
            await provider.browserRequests.record(request.uri.description)
            return await authorize(request)
        }
        router.post(endpoints.route(Endpoints.authorizePath)) { request, _ in
            await provider.stats.count("authorize_submit")
            return try await submit(request)
        }
        router.get(endpoints.route(Endpoints.logoutPath)) { request, _ in
            await provider.stats.count("logout")
            await provider.browserRequests.record(request.uri.description)
            return await logout(request, parameters: request.queryParameters)
        }
        router.post(endpoints.route(Endpoints.logoutPath)) { request, _ in
            await provider.stats.count("logout")
            return await logout(request, parameters: try await request.formParameters())
        }
    }

    // MARK: - /authorize

    private func authorize(_ request: Request) async -> Response {
        let query = request.queryParameters
        // Until client and redirect URI are known to be good, errors are shown, never redirected (§4.1.2.1).
        guard let clientId = query.nonEmpty("client_id"), let client = provider.users.client(clientId) else {
            return Self.page(status: .badRequest, title: "Sign-in error", body: "<p>Unknown or missing client_id.</p>")
        }
        if provider.settings.exactRedirectURIs, let redirectUri = query.nonEmpty("redirect_uri"),
            !client.redirectUris.contains(redirectUri)
        {
            // Worded as such providers word it: what was sent, and that it is not registered.
            let registered = client.redirectUris.isEmpty ? "none" : client.redirectUris.joined(separator: ", ")
            return Self.page(
                status: .badRequest, title: "Sign-in error",
                body:
                    "<p>The redirect URI \(Self.escape(redirectUri)) specified in the request does not match the "
                    + "redirect URIs configured for the application \(Self.escape(client.clientId)) (registered: "
                    + "\(Self.escape(registered))). Redirect URIs are matched exactly, port included.</p>")
        }
        guard let redirectUri = query.nonEmpty("redirect_uri"), Self.isAllowedRedirect(redirectUri, for: client) else {
            return Self.page(
                status: .badRequest, title: "Sign-in error",
                body:
                    "<p>redirect_uri must be a registered loopback URI (http://127.0.0.1:PORT/... or "
                    + "http://localhost:PORT/...).</p>"
            )
        }
        let state = query["state"]
        func fail(_ error: String, _ description: String) -> Response {
            Self.redirect(
                to: redirectUri,
                with: [("error", error), ("error_description", description)] + (state.map { [("state", $0)] } ?? []))
        }
        guard query["response_type"] == "code" else {
            return fail("unsupported_response_type", "Only response_type=code is supported.")
        }
        guard let challenge = query.nonEmpty("code_challenge") else {
            return fail("invalid_request", "PKCE is required: code_challenge is missing.")
        }
        guard query["code_challenge_method"] == "S256" else {
            return fail("invalid_request", "code_challenge_method must be S256.")
        }
        // OpenID Connect Core 3.1.2.1: prompt is a space-separated list; none goes alone.
        let prompts = Set((query["prompt"] ?? "").split(separator: " ").map(String.init))
        guard prompts.isSubset(of: ["none", "login", "select_account", "consent"]) else {
            return fail("invalid_request", "Unsupported prompt value.")
        }
        guard !prompts.contains("none") || prompts.count == 1 else {
            return fail("invalid_request", "prompt=none cannot be combined with other values.")
        }
        var maxAge: Int?
        if let text = query["max_age"] {
            guard let seconds = Int(text), seconds >= 0 else {
                return fail("invalid_request", "max_age must be a non-negative number of seconds.")
            }
            maxAge = seconds
            if provider.settings.refusesMaxAge { return fail("invalid_request", "max_age invalid") }
        }
        let pendingRequest = AuthorizationStore.PendingRequest(
            clientId: client.clientId, redirectUri: redirectUri,
            scopes: TokenIssuer.scopes(from: query["scope"], client: client),
            state: state,
            nonce: query["nonce"], codeChallenge: challenge, loginHint: query["login_hint"], createdAt: Date())

        if let session = await currentSession(request)?.session, !prompts.contains("select_account"),
            ignoresReauthentication(of: session) || !Self.mustReauthenticate(session, prompts, maxAge: maxAge)
        {
            let hintMatches = pendingRequest.loginHint.map { $0.lowercased() == session.username.lowercased() } ?? true
            if hintMatches || prompts.contains("none") {
                guard hintMatches else {
                    return fail("login_required", "The signed-in user does not match login_hint.")
                }
                return await complete(pendingRequest, session: session)
            }
        }
        if prompts.contains("none") {
            return fail("login_required", "AADSTS50058: A silent sign-in request was sent but no user is signed in.")
        }
        let flowId = await provider.authorization.addPending(pendingRequest)
        return signInForm(flowId: flowId, username: pendingRequest.loginHint ?? "", error: nil)
    }

    /// Whether this provider misbehaves for `session`: signs it in again whatever `prompt` and
    /// `max_age` say.
    private func ignoresReauthentication(of session: AuthorizationStore.Session) -> Bool {
        if provider.settings.ignoresReauthentication { return true }
        guard let within = provider.settings.ignoresReauthenticationWithin else { return false }
        return Date().timeIntervalSince(session.authTime) < Double(within)
    }

    /// Whether the browser session may not sign the person in without their credentials:
    /// `prompt=login`, or a session older than `max_age` (0: always, as OpenID Connect says).
    static func mustReauthenticate(_ session: AuthorizationStore.Session, _ prompts: Set<String>, maxAge: Int?) -> Bool
    {
        if prompts.contains("login") { return true }
        guard let maxAge else { return false }
        return maxAge == 0 || Date().timeIntervalSince(session.authTime) > Double(maxAge)
    }

    private func submit(_ request: Request) async throws -> Response {
        let form = try await request.formParameters()
        guard let flowId = form.nonEmpty("flow"), let pending = await provider.authorization.pendingRequest(flowId)
        else {
            return Self.page(
                status: .badRequest, title: "Sign-in error",
                body: "<p>This sign-in page has expired. Start again from the application.</p>")
        }
        let username = form["username"] ?? ""
        guard let user = provider.users.user(named: username), user.supportsPassword, let expected = user.password,
            ClientAuthenticator.constantTimeEqual(expected, form["password"] ?? "")
        else {
            provider.logger.info("sign-in form: invalid credentials", metadata: ["user": "\(username)"])
            return signInForm(flowId: flowId, username: username, error: "Your account or password is incorrect.")
        }
        guard await !provider.revocations.isDisabled(user.username) else {
            provider.logger.info("sign-in form: account disabled", metadata: ["user": "\(user.username)"])
            return signInForm(
                flowId: flowId, username: username,
                error: "Your account has been locked. Contact your support person to unlock it, then try again.")
        }
        await provider.authorization.removePending(flowId)
        let (sessionId, session) = await provider.authorization.createSession(username: user.username)
        var response = await complete(pending, session: session)
        response.setCookie(
            Cookie(
                name: Self.sessionCookie, value: sessionId, path: provider.endpoints.endpointPath,
                httpOnly: true, sameSite: .lax))
        return response
    }

    private func complete(_ request: AuthorizationStore.PendingRequest, session: AuthorizationStore.Session) async
        -> Response
    {
        let code = await provider.authorization.issueCode(for: request, session: session)
        provider.logger.info(
            "authorization code issued", metadata: ["client": "\(request.clientId)", "user": "\(session.username)"])
        return Self.redirect(
            to: request.redirectUri, with: [("code", code)] + (request.state.map { [("state", $0)] } ?? []))
    }

    private func currentSession(_ request: Request) async -> (id: String, session: AuthorizationStore.Session)? {
        guard let id = request.cookies[Self.sessionCookie]?.value,
            let session = await provider.authorization.session(id)
        else { return nil }
        return (id, session)
    }

    // MARK: - authorization_code grant

    /// RFC 6749 §4.1.3 with RFC 7636 §4.6: same client, same redirect_uri, matching code_verifier, single use.
    func codeGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        guard let code = parameters.nonEmpty("code") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'code'.")
        }
        guard let verifier = parameters.nonEmpty("code_verifier") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'code_verifier'.")
        }
        let grant: AuthorizationStore.CodeGrant
        switch await provider.authorization.redeem(code) {
        case .valid(let found):
            grant = found
        case .unknown:
            throw OAuthError.invalidGrant("The provided authorization code is invalid.", code: 9_002_313)
        case .alreadyUsed:
            throw OAuthError.invalidGrant("The provided authorization code was already redeemed.", code: 54005)
        case .expired:
            throw OAuthError.invalidGrant("The provided authorization code has expired.", code: 70008)
        }
        guard grant.clientId == client.clientId else {
            throw OAuthError.invalidGrant("The authorization code was issued to a different client.", code: 70000)
        }
        guard parameters["redirect_uri"] == grant.redirectUri else {
            throw OAuthError.invalidGrant(
                "The redirect_uri does not match the one used in the authorization request.", code: 50148)
        }
        guard Self.s256(verifier) == grant.codeChallenge else {
            throw OAuthError.invalidGrant(
                "The code_verifier does not match the code_challenge supplied in the authorization request.",
                code: 501481)
        }
        guard let user = provider.users.user(named: grant.username) else {
            throw OAuthError.invalidGrant("The user account no longer exists.", code: 50034)
        }
        return SignIn(user: user, client: client, scopes: grant.scopes, nonce: grant.nonce, authTime: grant.authTime)
    }

    static func s256(_ verifier: String) -> String {
        Data(SHA256.hash(data: Data(verifier.utf8))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    // MARK: - logout

    private func logout(_ request: Request, parameters: [String: String]) async -> Response {
        let session = await currentSession(request)
        if let session { await provider.authorization.endSession(session.id) }
        var response: Response
        // Only loopback targets are followed, so the endpoint cannot be used as an open redirector.
        if let target = parameters.nonEmpty("post_logout_redirect_uri"), Self.isLoopback(target) {
            response = Self.redirect(to: target, with: parameters.nonEmpty("state").map { [("state", $0)] } ?? [])
        } else {
            response = Self.page(
                status: .ok, title: "Signed out", body: "<p>You have signed out. You can close this window.</p>")
        }
        response.setCookie(
            Cookie(
                name: Self.sessionCookie, value: "", maxAge: 0, path: provider.endpoints.endpointPath, httpOnly: true))
        provider.logger.info("browser session ended", metadata: ["hadSession": "\(session != nil)"])
        return response
    }

    // MARK: - helpers

    static func isLoopback(_ uri: String) -> Bool {
        guard let components = URLComponents(string: uri), components.scheme == "http", let host = components.host
        else { return false }
        return ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host.lowercased()) && components.fragment == nil
    }

    /// RFC 8252 §7.3: any port on a loopback host (127.0.0.1, localhost, ::1); the path must match a registered URI if
    /// the client has any.
    static func isAllowedRedirect(_ uri: String, for client: ClientRegistration) -> Bool {
        guard isLoopback(uri), let components = URLComponents(string: uri) else { return false }
        if client.redirectUris.isEmpty { return true }
        return client.redirectUris.contains { registered in
            guard let expected = URLComponents(string: registered) else { return false }
            // All loopback hosts are equivalent here: the app binds whichever it can.
            return isLoopback(registered) && expected.path == components.path
        }
    }

    static func redirect(to target: String, with parameters: [(String, String)]) -> Response {
        let separator = target.contains("?") ? "&" : "?"
        let location = parameters.isEmpty ? target : target + separator + FormEncoding.encode(parameters)
        return Response(status: .found, headers: [.location: location, .cacheControl: "no-store"])
    }

    private func signInForm(flowId: String, username: String, error: String?) -> Response {
        let action = provider.endpoints.url(Endpoints.authorizePath)
        let message = error.map { "<p class=\"error\" role=\"alert\">\(Self.escape($0))</p>" } ?? ""
        let body = """
            <h1>Sign in</h1>
            \(message)
            <form method="post" action="\(Self.escape(action))">
              <input type="hidden" name="flow" value="\(Self.escape(flowId))">
              <label>Email or username <input type="text" name="username" autocomplete="username" value="\(Self.escape(username))" required></label>
              <label>Password <input type="password" name="password" autocomplete="current-password" required></label>
              <button type="submit">Sign in</button>
            </form>
            """
        return Self.page(status: .ok, title: "Sign in - idp-sim", body: body)
    }

    static func page(status: HTTPResponse.Status, title: String, body: String) -> Response {
        let html = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><title>\(escape(title))</title>
            <style>body{font-family:sans-serif;max-width:24em;margin:4em auto}label{display:block;margin:1em 0}input{width:100%}.error{color:#a00}</style>
            </head><body>
            \(body)
            </body></html>
            """
        return Response(
            status: status, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "'", with: "&#39;")
    }
}
