/// Request counters served by the test-only `GET /test/stats`, so tests can assert
/// "exactly one refresh call" without scraping logs.
actor Stats {
    private var grants: [String: Int] = [:]
    private var endpoints: [String: Int] = [:]

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
    }

    struct Snapshot: Sendable {
        var grants: [String: Int]
        var endpoints: [String: Int]

        /// `{"token": {"password": 3, "refresh_token": 1}, "revoke": 1, ...}`
        var json: [String: Any] {
            var result: [String: Any] = endpoints
            result["token"] = grants
            return result
        }
    }

    func snapshot() -> Snapshot {
        Snapshot(grants: grants, endpoints: endpoints)
    }
}
