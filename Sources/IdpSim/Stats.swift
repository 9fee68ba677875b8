/// Request counters served by the test-only `GET /test/stats`, so tests can assert
/// "exactly one refresh call" without scraping logs.
actor Stats {
    private var grants: [String: Int] = [:]
    private var endpoints: [String: Int] = [:]
    private var exchanges: [String: Int] = [:]

    /// Counts tokens granted through single sign-on: `native-sso`, `token-exchange`, `family-refresh`.
    func countExchange(_ mechanism: String) {
        exchanges[mechanism, default: 0] += 1
    }

    /// Counts a token endpoint call under its `grant_type` (also unknown ones, as sent).
    func countToken(grantType: String) {
        grants[grantType, default: 0] += 1
    }

    func count(_ endpoint: String) {
        endpoints[endpoint, default: 0] += 1
    }

    func reset() {
        grants = [:]
        endpoints = [:]
        exchanges = [:]
    }

    struct Snapshot: Sendable {
        var grants: [String: Int]
        var endpoints: [String: Int]
        var exchanges: [String: Int]

        /// `{"token": {"password": 3, "refresh_token": 1}, "exchanges": {"native-sso": 2}, "revoke": 1, ...}`
        var json: [String: Any] {
            var result: [String: Any] = endpoints
            result["token"] = grants
            result["exchanges"] = exchanges
            return result
        }
    }

    func snapshot() -> Snapshot {
        Snapshot(grants: grants, endpoints: endpoints, exchanges: exchanges)
    }
}
