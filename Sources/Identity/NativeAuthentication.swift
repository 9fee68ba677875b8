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
        if response.status == 404 || response.status == 405 { return nil }
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
