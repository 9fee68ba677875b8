import Foundation
import Hummingbird
import JWTKit

/// OpenID Connect Client-Initiated Backchannel Authentication Core 1.0, poll mode: a client names
/// a person (`login_hint` or an ID token of theirs), the person approves or denies on their own
/// authentication device (simulated here by the `/phone` routes), and meanwhile the client polls
/// the token endpoint with its `auth_req_id`.
struct BackchannelAuthentication: Sendable {
    let provider: Provider

    static let grantType = "urn:openid:params:grant-type:ciba"
    /// Beside the token endpoint, as the device authorization endpoint is.
    static let authorizationPath = "/oauth2/v2.0/bc-authorize"
    static let phonePath = "/phone"
    /// CIBA 7.1: a binding message is shown on a phone; keep it short and printable.
    static let maxBindingMessageLength = 64

    func register(on router: Router<BasicRequestContext>) {
        router.post(provider.endpoints.route(Self.authorizationPath)) { request, _ in
            try await authorize(request)
        }
        PhoneRoutes(provider: provider).register(on: router)
    }

    /// CIBA 7.1–7.3.
    private func authorize(_ request: Request) async throws -> Response {
        await provider.stats.count("bc-authorize")
        let (fault, replacement) = await FaultResponses.before(.backchannelAuthentication, provider: provider)
        if let replacement { return replacement }
        return FaultResponses.after(fault, try await start(request))
    }

    private func start(_ request: Request) async throws -> Response {
        let parameters = try await request.formParameters()
        let client = try ClientAuthenticator(users: provider.users).authenticate(request, parameters)
        let scope = parameters["scope"] ?? ""
        guard scope.split(separator: " ").contains("openid") else {
            throw OAuthError(
                status: .badRequest, error: "invalid_scope",
                description: "A backchannel authentication request's scope must contain 'openid'.", codes: [70011])
        }
        let user = try await hintedUser(parameters, client: client)
        if await provider.revocations.isDisabled(user.username) {
            throw Self.accessDenied("User account is disabled.", code: 50057)
        }
        let bindingMessage = try Self.bindingMessage(parameters)
        var lifetime = provider.settings.cibaLifetime
        if let text = parameters.nonEmpty("requested_expiry") {
            guard let requested = Int(text), requested > 0 else {
                throw OAuthError.invalidRequest("requested_expiry must be a positive whole number of seconds.")
            }
            lifetime = min(lifetime, requested)
        }
        let interval = provider.settings.cibaInterval
        guard
            let authReqId = await provider.backchannelRequests.start(
                username: user.username, clientId: client.clientId,
                scopes: TokenIssuer.scopes(from: scope, client: client), bindingMessage: bindingMessage,
                lifetime: TimeInterval(lifetime), interval: interval)
        else {
            throw Self.accessDenied(
                "\(user.username) has \(BackchannelRequestStore.maxPerUser) requests waiting already.", code: 50196)
        }
        provider.logger.info(
            "backchannel authentication requested",
            metadata: ["user": "\(user.username)", "client": "\(client.clientId)"])
        return JSONBody.response(
            ["auth_req_id": authReqId, "expires_in": lifetime, "interval": interval] as [String: Any],
            headers: .noStore)
    }

    /// CIBA 13: refused by the provider, 403.
    static func accessDenied(_ description: String, code: Int) -> OAuthError {
        OAuthError(status: .forbidden, error: "access_denied", description: description, codes: [code])
    }

    /// CIBA 7.1: exactly one hint; `login_hint` a username, `id_token_hint` an ID token this
    /// provider issued to this client (its signature checked; its expiry not, as hints are often old).
    private func hintedUser(_ parameters: [String: String], client: ClientRegistration) async throws -> UserAccount {
        let hints = ["login_hint", "id_token_hint", "login_hint_token"].filter { parameters.nonEmpty($0) != nil }
        guard hints.count == 1 else {
            throw OAuthError.invalidRequest(
                "Exactly one of login_hint, id_token_hint and login_hint_token is required; \(hints.count) given.")
        }
        if let username = parameters.nonEmpty("login_hint") {
            guard let user = provider.users.user(named: username) else {
                throw OAuthError(
                    status: .badRequest, error: "unknown_user_id",
                    description: "The user account \(username) does not exist in the directory.", codes: [50034])
            }
            return user
        }
        guard let hint = parameters.nonEmpty("id_token_hint") else {
            throw OAuthError.invalidRequest("login_hint_token is not supported.")
        }
        guard let claims = try? await provider.keys.verify(hint, as: HintIDToken.self),
            let user = provider.users.user(objectId: claims.oid),
            claims.iss == provider.endpoints.issuer(forTenant: user.tenantId ?? provider.users.tenantId),
            claims.aud == client.clientId
        else {
            throw OAuthError.invalidRequest("id_token_hint is not an ID token this provider issued to this client.")
        }
        return user
    }

    /// The ID token presented as a hint: signed by this provider; its expiry is not checked.
    // Field names are the JSON's own (snake_case), so that Codable needs no key table.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    private struct HintIDToken: JWTPayload {
        var iss: String
        var aud: String
        var oid: String
        func verify(using _: some JWTAlgorithm) async throws {}
    }

    /// CIBA 7.1 `binding_message`: shown on a phone, so short and plain. Counted in code points,
    /// so that combining marks cannot stack a screenful onto one character; control characters,
    /// line separators and bidirectional controls (which could reverse what the person reads) are
    /// refused.
    static func bindingMessage(_ parameters: [String: String]) throws -> String? {
        guard let message = parameters.nonEmpty("binding_message") else { return nil }
        guard message.unicodeScalars.count <= maxBindingMessageLength,
            !message.unicodeScalars.contains(where: isUnprintable)
        else {
            throw OAuthError(
                status: .badRequest, error: "invalid_binding_message",
                description:
                    "binding_message must be at most \(maxBindingMessageLength) characters, "
                    + "without control characters.",
                codes: [900144])
        }
        return message
    }

    private static func isUnprintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator: return true
        default: return scalar.properties.isBidiControl
        }
    }

    /// CIBA 10–11: one poll with the `auth_req_id`.
    func grant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        await provider.stats.count("ciba-poll")
        guard let authReqId = parameters.nonEmpty("auth_req_id") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'auth_req_id'.")
        }
        switch await provider.backchannelRequests.poll(authReqId, clientId: client.clientId) {
        case .pending:
            throw OAuthError(
                status: .badRequest, error: "authorization_pending",
                description: "The user has not yet answered on their device.", codes: [70016])
        case .slowDown:
            throw OAuthError(
                status: .badRequest, error: "slow_down", description: "The client polls too often.", codes: [70016])
        case .denied:
            throw OAuthError(
                status: .badRequest, error: "access_denied", description: "The user denied the request.",
                codes: [70011])
        case .expired:
            throw OAuthError(
                status: .badRequest, error: "expired_token", description: "The auth_req_id has expired.",
                codes: [70019])
        case .unknown:
            throw OAuthError.invalidGrant("The auth_req_id is not valid.", code: 70019)
        case .approved(let username, let scopes, let approvedAt):
            guard let user = provider.users.user(named: username) else {
                throw OAuthError.invalidGrant("The user no longer exists.", code: 50034)
            }
            return SignIn(user: user, client: client, scopes: scopes, nonce: nil, authTime: approvedAt)
        }
    }
}

/// The simulated phone: what the person's authentication device app does. Test-only; the broker
/// never calls these routes, and they never show an `auth_req_id` (the client's secret).
struct PhoneRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        router.get("/phone/requests") { request, _ in
            let user = try user(named: request.queryParameters["username"] ?? "")
            let pending = await provider.backchannelRequests.pending(username: user.username)
            return JSONBody.response(["requests": pending.map(\.json)])
        }
        router.post("/phone/requests/:id") { request, context in
            let id = context.parameters.get("id") ?? ""
            let form = try await request.formParameters()
            let status = try await decide(id: id, action: form["action"] ?? "")
            return JSONBody.response(["id": id, "status": status])
        }
        router.get(RouterPath(BackchannelAuthentication.phonePath)) { request, _ in
            let user = try user(named: request.queryParameters["username"] ?? "")
            return await page(user, notice: nil, status: .ok)
        }
        router.post(RouterPath(BackchannelAuthentication.phonePath)) { request, _ in
            let form = try await request.formParameters()
            let user = try user(named: form["username"] ?? "")
            do {
                _ = try await decide(id: form["id"] ?? "", action: form["action"] ?? "")
            } catch let error as OAuthError {
                return await page(user, notice: error.description, status: error.status)
            }
            let location = BackchannelAuthentication.phonePath + "?username=" + FormEncoding.encode(user.username)
            return Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store"])
        }
    }

    private func user(named username: String) throws -> UserAccount {
        guard !username.isEmpty else { throw OAuthError.invalidRequest("username is required") }
        guard let user = provider.users.user(named: username) else { throw OperatorRoutes.unknownUser(username) }
        return user
    }

    /// Approves or denies; the status the request now has.
    private func decide(id: String, action: String) async throws -> String {
        let approve: Bool
        switch action {
        case "approve": approve = true
        case "deny": approve = false
        default: throw OAuthError.invalidRequest("action must be approve or deny.")
        }
        guard let decided = await provider.backchannelRequests.decide(phoneId: id, approve: approve) else {
            throw OAuthError(
                status: .notFound, error: "not_found",
                description: "No request waits with that id: unknown, expired or already answered.")
        }
        provider.logger.info(
            approve ? "backchannel authentication approved" : "backchannel authentication denied",
            metadata: ["user": "\(decided.username)", "client": "\(decided.clientId)"])
        return approve ? "approved" : "denied"
    }

    private func page(_ user: UserAccount, notice: String?, status: HTTPResponse.Status) async -> Response {
        let escape = AuthorizeRoutes.escape
        let pending = await provider.backchannelRequests.pending(username: user.username)
        let items = pending.map { item in
            """
            <li><p class="binding">\(escape(item.bindingMessage ?? "(no message)"))</p>
            <p>\(escape(item.clientId)) asks for \(escape(item.scope)); \(item.expiresIn) s left.</p>
            <form method="post" action="\(escape(BackchannelAuthentication.phonePath))">
              <input type="hidden" name="id" value="\(escape(item.id))">
              <input type="hidden" name="username" value="\(escape(user.username))">
              <button type="submit" name="action" value="approve">Approve</button>
              <button type="submit" name="action" value="deny">Deny</button>
            </form></li>
            """
        }
        let message = notice.map { "<p class=\"error\" role=\"alert\">\(escape($0))</p>" } ?? ""
        let list = items.isEmpty ? "<p>Nothing waits for you.</p>" : "<ul>\(items.joined())</ul>"
        let body = """
            <style>.binding{font-size:2em;font-weight:bold;margin:0.2em 0}</style>
            <h1>\(escape(user.displayName))'s phone</h1>
            \(message)
            \(list)
            """
        return AuthorizeRoutes.page(
            status: status, title: "Phone - idp-sim", body: body)
    }
}
