import Foundation
import Hummingbird

/// Microsoft Entra native authentication, sign-in part: `POST {authority}/oauth2/v2.0/initiate`,
/// `POST {authority}/oauth2/v2.0/challenge`, and the `oob` / `password`+`continuation_token` grants
/// of the token endpoint. Responses follow Entra's shapes (continuation_token, challenge_type, suberror).
struct NativeAuthRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        router.post(provider.endpoints.route(Endpoints.initiatePath)) { request, _ in
            await provider.stats.count("initiate")
            return try await initiate(request.formParameters())
        }
        router.post(provider.endpoints.route(Endpoints.challengePath)) { request, _ in
            await provider.stats.count("challenge")
            return try await challenge(request.formParameters())
        }
    }

    private func initiate(_ parameters: [String: String]) async throws -> Response {
        let client = try nativeClient(parameters)
        let types = try challengeTypes(parameters)
        guard let username = parameters.nonEmpty("username") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'username'.")
        }
        guard let user = provider.users.user(named: username) else {
            throw OAuthError(
                status: .badRequest, error: "user_not_found",
                description: "The user account \(username) does not exist in the \(provider.users.tenantId) directory.",
                codes: [50034])
        }
        guard choose(for: user, among: types) != nil else {
            return JSONBody.response(["challenge_type": "redirect"])
        }
        let token = await provider.nativeAuth.start(
            username: user.username, clientId: client.clientId, challengeTypes: types)
        return JSONBody.response(["continuation_token": token])
    }

    private func challenge(_ parameters: [String: String]) async throws -> Response {
        let client = try nativeClient(parameters)
        let flow = try await liveFlow(parameters, client: client)
        let types = parameters.nonEmpty("challenge_type") != nil ? try challengeTypes(parameters) : flow.challengeTypes
        guard let user = provider.users.user(named: flow.username), let method = choose(for: user, among: types) else {
            return JSONBody.response(["challenge_type": "redirect"])
        }
        switch method {
        case .password:
            guard let next = await provider.nativeAuth.setChallenge(.password, flowId: flow.id) else {
                throw Self.expiredFlow()
            }
            return JSONBody.response(["challenge_type": "password", "continuation_token": next])
        case .oob:
            let code = RandomToken.digits(NativeAuthStore.codeLength)
            guard let next = await provider.nativeAuth.setChallenge(.oob(code: code, sentAt: Date()), flowId: flow.id)
            else {
                throw Self.expiredFlow()
            }
            await provider.outbox.send(code: code, to: user.username)
            provider.logger.info("one-time code sent", metadata: ["user": "\(user.username)"])
            return JSONBody.response([
                "challenge_type": "oob",
                "binding_method": "prompt",
                "challenge_channel": "email",
                "challenge_target_label": Self.mask(user.email ?? user.username),
                "code_length": NativeAuthStore.codeLength,
                "interval": 300,
                "continuation_token": next,
            ])
        case .none:
            return JSONBody.response(["challenge_type": "redirect"])
        }
    }

    /// grant_type=oob: the one-time code from the email.
    func oobGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        let flow = try await liveFlow(parameters, client: client)
        guard let code = parameters.nonEmpty("oob") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'oob'.")
        }
        switch await provider.nativeAuth.checkCode(code, flowId: flow.id) {
        case .valid:
            break
        case .wrongCode:
            throw OAuthError.invalidGrant("The code is incorrect.", code: 50181, suberror: "invalid_oob_value")
        case .expired:
            throw OAuthError(
                status: .badRequest, error: "expired_token", description: "The one-time code has expired.",
                codes: [552003])
        case .notChallenged:
            throw OAuthError.invalidGrant("No one-time code was sent in this sign-in.", code: 55200)
        }
        return try await finish(flow, parameters: parameters, client: client)
    }

    /// grant_type=password with a continuation_token: the password step of native sign-in.
    func passwordGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        let flow = try await liveFlow(parameters, client: client)
        guard flow.challenge == .password else {
            throw OAuthError.invalidGrant("The password challenge was not issued in this sign-in.", code: 55200)
        }
        guard let password = parameters["password"] else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'password'.")
        }
        guard let user = provider.users.user(named: flow.username), let expected = user.password,
            ClientAuthenticator.constantTimeEqual(expected, password)
        else {
            throw OAuthError.invalidGrant(
                "Error validating credentials due to invalid username or password.", code: 50126)
        }
        return try await finish(flow, parameters: parameters, client: client)
    }

    private func finish(_ flow: NativeAuthStore.Flow, parameters: [String: String], client: ClientRegistration)
        async throws -> SignIn
    {
        guard let user = provider.users.user(named: flow.username) else {
            throw OAuthError(
                status: .badRequest, error: "user_not_found", description: "The user account no longer exists.",
                codes: [50034])
        }
        await provider.nativeAuth.finish(flowId: flow.id)
        return SignIn(
            user: user, client: client, scopes: TokenIssuer.scopes(from: parameters["scope"], client: client),
            nonce: nil,
            authTime: Date())
    }

    private enum Method { case password, oob, none }

    /// Password when the user has one and the client can prompt for it, else an email code.
    private func choose(for user: UserAccount, among types: [String]) -> Method? {
        if user.supportsPassword, types.contains("password") { return .password }
        if user.supportsEmailOTP, types.contains("oob") { return .oob }
        return nil
    }

    private func nativeClient(_ parameters: [String: String]) throws -> ClientRegistration {
        guard let clientId = parameters.nonEmpty("client_id") else {
            throw OAuthError.invalidRequest("The request body must contain the following parameter: 'client_id'.")
        }
        guard let client = provider.users.client(clientId) else {
            throw OAuthError(
                status: .badRequest, error: "unauthorized_client",
                description: "Application with identifier '\(clientId)' was not found in the directory.",
                codes: [700016])
        }
        return client
    }

    /// Entra requires `redirect` in the list: the client must always be able to fall back to the browser.
    private func challengeTypes(_ parameters: [String: String]) throws -> [String] {
        let types = (parameters["challenge_type"] ?? "").split(separator: " ").map(String.init)
        guard types.contains("redirect") else {
            throw OAuthError.invalidRequest("challenge_type must contain 'redirect'.", code: 55101)
        }
        return types
    }

    private func liveFlow(_ parameters: [String: String], client: ClientRegistration) async throws
        -> NativeAuthStore.Flow
    {
        guard let token = parameters.nonEmpty("continuation_token") else {
            throw OAuthError.invalidRequest(
                "The request body must contain the following parameter: 'continuation_token'.")
        }
        guard let flow = await provider.nativeAuth.flow(for: token, clientId: client.clientId) else {
            throw Self.expiredFlow()
        }
        return flow
    }

    private static func expiredFlow() -> OAuthError {
        OAuthError(
            status: .badRequest, error: "expired_token",
            description: "The continuation token is invalid or has expired.", codes: [552003])
    }

    /// "alice@contoso.com" -> "a***@c***.com": enough for the user to recognise the address.
    static func mask(_ address: String) -> String {
        let parts = address.split(separator: "@", maxSplits: 1)
        guard parts.count == 2, let localFirst = parts[0].first else { return "***" }
        let domain = parts[1]
        let labels = domain.split(separator: ".")
        guard let domainFirst = domain.first, labels.count >= 2, let tld = labels.last else {
            return "\(localFirst)***@***"
        }
        return "\(localFirst)***@\(domainFirst)***.\(tld)"
    }
}
