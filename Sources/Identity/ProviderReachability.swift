import BrokerCore
import HTTP

extension OIDCProvider {
    /// Checks that the server of the authorization endpoint answers before a browser is sent to
    /// it. Discovery may have been read long before, and a browser opened on a provider that is
    /// down shows the person a dead page while the flow waits minutes for a sign-in nobody can
    /// finish. Any HTTP answer will do (its page, a 400 for the missing parameters, a redirect); no
    /// answer, or 5xx and 429 after the usual retries and timeouts, fails the call at once, as
    /// `ServerUnavailable` (`ServerError` for a 500), before any listener or browser is opened.
    func checkAuthorizationEndpointAnswers(_ authorize: String) async throws(BrokerFailure) {
        try await requester.withBudget { () async throws(BrokerFailure) in
            _ = try await send(
                .get(authorize), kind: .signIn(.browser), what: "the sign-in page (its authorization endpoint)",
                replay: .idempotent)
        }
    }
}
