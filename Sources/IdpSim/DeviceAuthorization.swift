import Foundation
import Hummingbird

/// The device authorization grant (RFC 8628): a device without a browser (a kiosk) asks for a
/// user code; the person enters it at the verification page on any other device, signs in there
/// and approves (or denies); meanwhile the device polls the token endpoint with the device code.
struct DeviceAuthorization: Sendable {
    let provider: Provider

    static let grantType = "urn:ietf:params:oauth:grant-type:device_code"
    /// Entra's paths: the authorization endpoint beside the token endpoint, the page at the root.
    static let authorizationPath = "/oauth2/v2.0/devicecode"
    static let pagePath = "/device"

    func register(on router: Router<BasicRequestContext>) {
        router.post(provider.endpoints.route(Self.authorizationPath)) { request, _ in
            try await authorize(request)
        }
        router.get(RouterPath(Self.pagePath)) { request, _ in
            page(userCode: request.queryParameters["user_code"] ?? "", error: nil)
        }
        router.post(RouterPath(Self.pagePath)) { request, _ in
            try await decide(request)
        }
    }

    /// RFC 8628 §3.1–3.2.
    private func authorize(_ request: Request) async throws -> Response {
        await provider.stats.count("devicecode")
        let (fault, replacement) = await FaultResponses.before(.deviceAuthorization, provider: provider)
        if let replacement { return replacement }
        return FaultResponses.after(fault, try await startDeviceAuthorization(request))
    }

    private func startDeviceAuthorization(_ request: Request) async throws -> Response {
        let parameters = try await request.formParameters()
        let client = try ClientAuthenticator(users: provider.users).authenticate(request, parameters)
        let settings = provider.settings
        let grant = await provider.deviceCodes.start(
            clientId: client.clientId, scopes: TokenIssuer.scopes(from: parameters["scope"], client: client),
            lifetime: TimeInterval(settings.deviceCodeLifetime), interval: settings.deviceCodeInterval)
        let verification = provider.endpoints.baseURL + Self.pagePath
        return JSONBody.response(
            [
                "device_code": grant.deviceCode, "user_code": grant.userCode,
                "verification_uri": verification,
                "verification_uri_complete": verification + "?user_code=" + grant.userCode,
                "expires_in": settings.deviceCodeLifetime, "interval": settings.deviceCodeInterval,
                "message": "To sign in, open \(verification) and enter the code \(grant.userCode).",
            ] as [String: Any], headers: .noStore)
    }

    /// The verification page's form: the user code, the person's username and password, and
    /// whether to approve the device or deny it.
    private func decide(_ request: Request) async throws -> Response {
        let form = try await request.formParameters()
        let userCode = (form["user_code"] ?? "").uppercased()
        if form["action"] == "deny" {
            guard await provider.deviceCodes.deny(userCode: userCode) else {
                return page(userCode: userCode, error: "That code is unknown or has expired.")
            }
            return AuthorizeRoutes.page(status: .ok, title: "Denied - idp-sim", body: "<h1>The device was denied.</h1>")
        }
        guard let user = provider.users.user(named: form["username"] ?? ""), user.supportsPassword,
            let expected = user.password, ClientAuthenticator.constantTimeEqual(expected, form["password"] ?? "")
        else {
            return page(userCode: userCode, error: "The username or password is not right.")
        }
        guard await provider.deviceCodes.approve(userCode: userCode, username: user.username) else {
            return page(userCode: userCode, error: "That code is unknown or has expired.")
        }
        provider.logger.info("device approved", metadata: ["user": "\(user.username)"])
        return AuthorizeRoutes.page(
            status: .ok, title: "Signed in - idp-sim", body: "<h1>You are signed in on the device.</h1>")
    }

    private func page(userCode: String, error: String?) -> Response {
        let message = error.map { "<p class=\"error\" role=\"alert\">\(AuthorizeRoutes.escape($0))</p>" } ?? ""
        let body = """
            <h1>Sign in on a device</h1>
            \(message)
            <form method="post" action="\(AuthorizeRoutes.escape(Self.pagePath))">
              <label>Code <input type="text" name="user_code" value="\(AuthorizeRoutes.escape(userCode))" required></label>
              <label>Email or username <input type="text" name="username" autocomplete="username"></label>
              <label>Password <input type="password" name="password" autocomplete="current-password"></label>
              <button type="submit" name="action" value="approve">Sign in</button>
              <button type="submit" name="action" value="deny">This was not me</button>
            </form>
            """
        return AuthorizeRoutes.page(
            status: error == nil ? .ok : .badRequest, title: "Device sign-in - idp-sim", body: body)
    }

    /// RFC 8628 §3.4–3.5: the device's poll with its device code.
    func grant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        guard let deviceCode = parameters.nonEmpty("device_code") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'device_code'.")
        }
        switch await provider.deviceCodes.poll(deviceCode, clientId: client.clientId) {
        case .pending:
            throw OAuthError(
                status: .badRequest, error: "authorization_pending",
                description: "The user has not yet finished signing in.", codes: [70016])
        case .slowDown:
            throw OAuthError(
                status: .badRequest, error: "slow_down", description: "The device polls too often.", codes: [70016])
        case .denied:
            throw OAuthError(
                status: .badRequest, error: "access_denied", description: "The user denied the sign-in.",
                codes: [70011])
        case .expired:
            throw OAuthError(
                status: .badRequest, error: "expired_token", description: "The device code has expired.",
                codes: [70019])
        case .unknown:
            throw OAuthError.invalidGrant("The device code is not valid.", code: 70019)
        case .approved(let username, let scopes):
            guard let user = provider.users.user(named: username) else {
                throw OAuthError.invalidGrant("The user no longer exists.", code: 50034)
            }
            return SignIn(user: user, client: client, scopes: scopes, nonce: nil, authTime: Date())
        }
    }
}

/// The device codes handed out and what became of each.
actor DeviceCodeStore {
    enum Poll: Equatable {
        case pending, slowDown, denied, expired, unknown
        case approved(username: String, scopes: [String])
    }

    private struct Grant {
        var deviceCode: String
        var userCode: String
        var clientId: String
        var scopes: [String]
        var expiresAt: Date
        var pace: PollPace
        var decision: Decision = .undecided
    }

    private enum Decision {
        case undecided
        case approved(String)
        case denied
    }

    private var grants: [String: Grant] = [:]
    private let slowDowns: Int

    init(slowDowns: Int) { self.slowDowns = slowDowns }

    func start(clientId: String, scopes: [String], lifetime: TimeInterval, interval: Int) -> (
        deviceCode: String, userCode: String
    ) {
        let deviceCode = RandomToken.make(bytes: 24)
        // Eight letters a person can read out and type: no vowels, no look-alikes.
        let alphabet = Array("BCDFGHJKLMNPQRSTVWXZ")
        let userCode = String((0..<8).map { _ in alphabet[Int.random(in: 0..<alphabet.count)] })
        grants[deviceCode] = Grant(
            deviceCode: deviceCode, userCode: userCode, clientId: clientId, scopes: scopes,
            expiresAt: Date().addingTimeInterval(lifetime),
            pace: PollPace(interval: interval, forcedSlowDowns: slowDowns))
        return (deviceCode, userCode)
    }

    func approve(userCode: String, username: String) -> Bool {
        decide(userCode, .approved(username))
    }

    func deny(userCode: String) -> Bool {
        decide(userCode, .denied)
    }

    private func decide(_ userCode: String, _ decision: Decision) -> Bool {
        guard let key = grants.first(where: { $0.value.userCode == userCode })?.key,
            let grant = grants[key], grant.expiresAt > Date(), case .undecided = grant.decision
        else { return false }
        grants[key]?.decision = decision
        return true
    }

    /// One poll: too early after the last one is `slow_down` (and the interval grows by 5 s, §3.5).
    func poll(_ deviceCode: String, clientId: String) -> Poll {
        guard var grant = grants[deviceCode], grant.clientId == clientId else { return .unknown }
        let now = Date()
        guard grant.expiresAt > now else {
            grants[deviceCode] = nil
            return .expired
        }
        defer { grants[deviceCode] = grant }
        if grant.pace.slowDown(at: now) { return .slowDown }
        switch grant.decision {
        case .undecided: return .pending
        case .denied:
            grant.expiresAt = now
            return .denied
        case .approved(let username):
            grant.expiresAt = now  // one device code, one set of tokens
            return .approved(username: username, scopes: grant.scopes)
        }
    }
}
