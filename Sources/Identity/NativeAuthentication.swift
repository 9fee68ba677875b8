import BrokerCore
import HTTP
import JSON

/// Native authentication as Microsoft Entra documents it: the app collects the username, the
/// one-time code or the password itself, and the provider answers through
/// `{authority}/oauth2/v2.0/initiate`, `.../challenge` and the token endpoint, passing a
/// `continuation_token` from step to step. These endpoints are not in the discovery document;
/// their place under the authority is fixed by that API.
extension OIDCProvider {
    /// The challenge types the broker can handle for each kind of sign-in, in the order it prefers them.
    /// `redirect` is always offered: a provider that wants the browser says so instead of failing.
    enum NativeChallenge: String {
        case code = "oob redirect"
        case password = "password redirect"
    }

    public func startCodeSignIn(clientId: String, username: String) async throws -> ProviderCodeChallenge {
        try await requester.withBudget { () async throws(BrokerFailure) -> ProviderCodeChallenge in
            guard try await endpoints(for: .signIn(.emailCode)).mayOfferNativeAuthentication,
                await nativeAuthentication.mayBeOffered
            else {
                await nativeAuthentication.markNotOffered()
                throw Self.notOffered
            }
            guard let continuation = try await initiate(clientId: clientId, username: username, challenge: .code) else {
                await nativeAuthentication.markNotOffered()
                throw Self.notOffered
            }
            return try await challenge(clientId: clientId, continuationToken: continuation, expecting: .code)
        }
    }

    public func resendCode(clientId: String, continuationToken: String) async throws -> ProviderCodeChallenge {
        try await requester.withBudget { () async throws(BrokerFailure) -> ProviderCodeChallenge in
            try await challenge(clientId: clientId, continuationToken: continuationToken, expecting: .code)
        }
    }

    public func submitCode(clientId: String, continuationToken: String, code: String, scopes: Scopes) async throws
        -> ProviderTokens
    {
        try await requester.withBudget { () async throws(BrokerFailure) -> ProviderTokens in
            try await grant(
                .signIn(.emailCode), clientId: clientId, scopes: scopes,
                fields: [
                    ("grant_type", "oob"), ("oob", code), ("continuation_token", continuationToken),
                ])
        }
    }

    /// The password through native authentication (initiate, challenge `password`, token), or
    /// nil when the provider does not offer native authentication.
    func nativePasswordSignIn(clientId: String, username: String, password: String, scopes: Scopes)
        async throws(BrokerFailure) -> ProviderTokens?
    {
        guard let continuation = try await initiate(clientId: clientId, username: username, challenge: .password) else {
            return nil
        }
        guard
            let step = try await post(
                path: "challenge", kind: .signIn(.password),
                fields: [
                    ("client_id", clientId), ("challenge_type", NativeChallenge.password.rawValue),
                    ("continuation_token", continuation),
                ])
        else { throw Self.notOffered }
        guard step["challenge_type"]?.string == "password", let next = step["continuation_token"]?.string else {
            throw Self.unexpectedChallenge(step, wanted: .password)
        }
        return try await grant(
            .signIn(.password), clientId: clientId, scopes: scopes,
            fields: [
                ("grant_type", "password"), ("password", password), ("continuation_token", next),
                ("username", username),
            ])
    }

    /// Whether native authentication may be offered: what discovery says where it lists its
    /// grants, else what a try taught, else what its initiate endpoint answers a request that
    /// starts nothing (no client, no user: the API answers it with an OAuth error, JSON; a server
    /// without it with 404, a redirect or a page). A provider that fails or cannot be reached
    /// leaves it open, to be tried again.
    func nativeAuthenticationMayBeOffered(_ endpoints: ProviderMetadata) async throws(BrokerFailure) -> Bool {
        guard endpoints.mayOfferNativeAuthentication else { return false }
        guard await nativeAuthentication.known == .unknown else { return await nativeAuthentication.mayBeOffered }
        let response: HTTPResponse
        do {
            response = try await requester.send(
                .postForm(authority + "/oauth2/v2.0/initiate", fields: [("challenge_type", "redirect")]),
                what: "the native-authentication probe", replay: .idempotent)
        } catch {
            logger.notice(
                "native authentication could not be probed; it is taken as offered",
                metadata: ["error": "\(error)"])
            return true
        }
        if Self.isNotNativeAuthentication(response) {
            await nativeAuthentication.markNotOffered()
            logger.info(
                "the provider offers no native authentication",
                metadata: ["initiate": "HTTP \(response.status) \(response.header("content-type") ?? "")"])
            return false
        }
        await nativeAuthentication.markThere()
        return true
    }

    /// Whether an answer at a native-authentication endpoint says the API is not there: 404, 405,
    /// a redirect (to a sign-in page), or anything but JSON (a web server's login page for every
    /// path it does not know, `200 text/html`). A body that says it is JSON and is not stays a
    /// broken answer of the API.
    static func isNotNativeAuthentication(_ response: HTTPResponse) -> Bool {
        if response.status == 404 || response.status == 405 || (300...399).contains(response.status) { return true }
        let type = response.header("content-type")?.lowercased() ?? ""
        if type.contains("json") { return false }
        if type.hasPrefix("text/html") { return true }
        return (try? JSONValue.parse(response.body, rules: .provider)) == nil
    }

    /// Starts a flow and returns its continuation token, or nil when the provider has no
    /// native-authentication endpoints.
    private func initiate(clientId: String, username: String, challenge: NativeChallenge) async throws(BrokerFailure)
        -> String?
    {
        guard
            let answer = try await post(
                path: "initiate", kind: challenge == .code ? .signIn(.emailCode) : .signIn(.password),
                fields: [
                    ("client_id", clientId), ("challenge_type", challenge.rawValue), ("username", username),
                ])
        else { return nil }
        if answer["challenge_type"]?.string == "redirect" { throw Self.redirect(username, for: challenge) }
        guard let continuation = answer["continuation_token"]?.string else {
            throw BrokerFailure(.serverError, "the provider's initiate answer has no continuation_token")
        }
        return continuation
    }

    private func challenge(clientId: String, continuationToken: String, expecting: NativeChallenge)
        async throws(BrokerFailure) -> ProviderCodeChallenge
    {
        guard
            let step = try await post(
                path: "challenge", kind: .signIn(.emailCode),
                fields: [
                    ("client_id", clientId), ("challenge_type", expecting.rawValue),
                    ("continuation_token", continuationToken),
                ])
        else { throw Self.notOffered }
        guard step["challenge_type"]?.string == "oob", let next = step["continuation_token"]?.string else {
            throw Self.unexpectedChallenge(step, wanted: .code)
        }
        let length = step["code_length"]?.int64 ?? 0
        // Shown to the person as the provider words them, after the outside-text rule.
        return ProviderCodeChallenge(
            continuationToken: next, channel: OutsideText.cleaned(step["challenge_channel"]?.string ?? "email"),
            sentTo: OutsideText.cleaned(step["challenge_target_label"]?.string ?? ""),
            codeLength: UInt32(clamping: max(0, length)))
    }

    /// Posts a form to `{authority}/oauth2/v2.0/<path>` and returns its JSON answer, or nil
    /// when the provider has no such endpoint.
    ///
    /// One-time for the retry policy: a continuation token is spent by each step, and a
    /// challenge sends an email (a second one would replace the code the user is reading).
    private func post(path: String, kind: GrantKind, fields: [(String, String)]) async throws(BrokerFailure)
        -> JSONValue?
    {
        let url = authority + "/oauth2/v2.0/" + path
        let response = try await send(
            .postForm(url, fields: fields), kind: kind,
            what: "the native-authentication \(path) request", replay: .oneTime)
        if Self.isNotNativeAuthentication(response) { return nil }
        guard response.status == 200 else { throw Self.oauthError(response).brokerFailure(during: kind, host: host) }
        do {
            return try JSONValue.providerObject(response.body, what: "the provider's \(path) answer")
        } catch {
            throw error.brokerFailure(during: kind, host: host)
        }
    }

    static let notOffered = BrokerFailure(
        .notSupported,
        "the provider offers no native authentication (no {authority}/oauth2/v2.0/initiate); use interactive sign-in")

    /// The provider's `redirect` to a flow the broker asked for: Entra gives no other reason, and
    /// answers so when the user has no such method (no email one-time passcode, no password), so
    /// the person is told that, and the other ways in, rather than only "the browser".
    static func redirect(_ username: String?, for challenge: NativeChallenge) -> BrokerFailure {
        let user = username.map { OutsideText.escaped($0) } ?? "this user"
        switch challenge {
        case .code:
            return BrokerFailure(
                .interactionRequired,
                "the provider cannot send \(user) a one-time code by email (it wants the browser instead, as it does "
                    + "for a user without an email-code method); sign in with a password, a device code or in the "
                    + "browser")
        case .password:
            return BrokerFailure(
                .interactionRequired,
                "the provider cannot sign \(user) in with a password (it wants the browser instead, as it does for a "
                    + "user without a password); sign in with an emailed code, a device code or in the browser")
        }
    }

    static func unexpectedChallenge(_ step: JSONValue, wanted: NativeChallenge) -> BrokerFailure {
        if step["challenge_type"]?.string == "redirect" { return redirect(nil, for: wanted) }
        return BrokerFailure(
            .notSupported,
            "the provider asked for \(step["challenge_type"]?.string ?? "nothing") where the broker offered "
                + (wanted == .code ? "a one-time code" : "a password"))
    }
}
