import BrokerAPI
import Foundation
import HTTP
import TestSupport
import Testing

/// The organisation ends a session, and the device hears it: idp-sim as an OpenID Shared Signals
/// transmitter (poll delivery, RFC 8936) and as a Continuous Access Evaluation resource, real
/// brokerd, brokerctl and apps on a private bus, HTTP over loopback. Hostile events come from the
/// transmitter's own test switch (`/test/ssf/inject`), as a compromised or buggy transmitter would
/// send them. Run on their own (the Makefile's latency suites): a revocation must reach every app
/// within the poll interval plus a second.
@Suite("The provider ends a session", .serialized)
struct ProviderSignOutTests {
    /// The broker's own confidential client at idp-sim (the client-credentials grant).
    static let receiver = TestUsers.confidentialClients[0]
    static let pollSeconds = 1

    /// A broker receiving idp-sim's Shared Signals, `extra` added to its configuration.
    static func receiving(
        _ extra: String = "", idpArguments: [String] = [], configIn directory: TemporaryDirectory? = nil
    ) async throws -> BrokerEnvironment {
        let directory = try directory ?? TemporaryDirectory()
        let secret = try directory.write("ssf.secret", receiver.secret + "\n")
        chmod(secret, 0o600)
        // The transmitter is idp-sim's issuer, the authority: read it from a first idp-sim is not
        // possible before it runs, so the configuration names it once the environment is up.
        let env = try BrokerEnvironment(idpArguments: idpArguments)
        let config = try directory.write(
            "broker.conf",
            """
            {"sharedSignals": {"transmitter": "\(env.idp.authority)", "clientId": "\(receiver.clientId)",
              "clientSecretFile": "\(secret)", "pollSeconds": \(pollSeconds)}\(extra)}
            """)
        chmod(config, 0o600)
        try env.restartBroker(extraArguments: ["--config", config])
        try env.brokerd.process.waitForLine(timeout: .seconds(15), stderr: true) {
            $0.contains("receiving Shared Signals")
        }
        return env
    }

    static func post(_ env: BrokerEnvironment, _ path: String, json: String? = nil) async throws -> [String: Any] {
        var request = HTTPRequest(method: "POST", url: env.idp.baseURL + path, body: Array((json ?? "").utf8))
        if json != nil { request.headers.append(HTTPHeader("Content-Type", "application/json")) }
        let response = try await HTTPClient.shared.send(request)
        guard (200..<300).contains(response.status) else {
            throw ProcessFailure("POST \(path) answered \(response.status): \(response.bodyText)")
        }
        return (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
    }

    /// Until the transmitter holds nothing unacknowledged for the stream (bounded; the transmitter
    /// announces nothing, so its test view is read again every 50 ms).
    static func waitUntilAcknowledged(_ env: BrokerEnvironment, timeout: Duration = .seconds(10)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let streams = try await HTTPClient.shared.send(.get(env.idp.baseURL + "/test/ssf/streams"))
            let list = (try? JSONSerialization.jsonObject(with: Data(streams.body))) as? [[String: Any]] ?? []
            if !list.isEmpty, list.allSatisfy({ $0["queued"] as? Int == 0 }) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw ProcessFailure("the transmitter still holds unacknowledged events after \(timeout)")
    }

    static func current(_ env: BrokerEnvironment) throws -> String? {
        let result = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        return (result["current"] as? [String: Any])?["username"] as? String
    }

    static func facts(_ env: BrokerEnvironment) throws -> [String: Any] {
        try env.brokerctl(["device-info", "--json"]).json()["extraDeviceInformation"] as? [String: Any] ?? [:]
    }

    @Test("revoking alice's sessions at the provider signs every app out within the poll interval and a second")
    func revocationReachesEveryApp() async throws {
        let env = try await Self.receiving()
        let apps = try (0..<3).map { _ in try env.watch() }
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        for client in ["calendar-app", "notes-app"] {
            #expect(try env.brokerctl(["token", "--client-id", client, "--scope", "User.Read"]).status == 0)
        }
        let started = Date()
        let revoked = try await Self.post(env, "/test/revoke-sessions?username=\(TestUsers.alice.username)")
        #expect(revoked["queuedEvents"] as? Int == 1, "\(revoked)")
        for app in apps {
            let line = try app.waitForLine(timeout: .seconds(10)) { $0.contains("signed-out") }
            #expect(line.contains("signed-out (provider)"), "\(line)")
        }
        let elapsed = Date().timeIntervalSince(started)
        print("# figure: \(String(format: "%.2f", elapsed)) s from the revocation to the last app's AccountChanged")
        #expect(elapsed < Double(Self.pollSeconds) + 1, "took \(elapsed) s")
        for client in TestUsers.clients {
            let token = try env.brokerctl(["token", "--client-id", client, "--scope", "User.Read"])
            #expect(token.status != 0 && token.stderr.contains("NoAccount"), "\(client): \(token.stderr)")
        }
        // The event is acknowledged: the transmitter holds nothing more for the stream.
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) { $0.contains("event processed") }
        try await Self.waitUntilAcknowledged(env)
        #expect(!env.brokerd.process.stderrText.contains("eyJ"), "a token or SET in brokerd's log")
    }

    @Test("revoking bob, who is not signed in here, changes nothing on this device")
    func anotherUsersRevocationChangesNothing() async throws {
        let env = try await Self.receiving()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        _ = try await Self.post(env, "/test/revoke-sessions?username=\(TestUsers.bob.username)")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("an account not signed in here")
        }
        #expect(try Self.current(env) == TestUsers.alice.username)
        #expect(try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"]).status == 0)
    }

    @Test("a SET signed by another key, for another audience or issuer, a replay, an old one: nobody signed out")
    func hostileEventsSignNobodyOut() async throws {
        let env = try await Self.receiving()
        let alice = TestUsers.alice.username
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        for (forgery, expected) in [
            ("wrongKey", "a security event token was refused"), ("wrongAudience", "a security event token was refused"),
            ("wrongIssuer", "a security event token was refused"),
        ] {
            let mark = env.brokerd.process.stderrText.split(separator: "\n").count
            _ = try await Self.post(
                env, "/test/ssf/inject",
                json: #"{"username": "\#(alice)", "event": "session-revoked", "forgery": "\#(forgery)"}"#)
            try env.brokerd.process.waitForLine(after: mark, timeout: .seconds(10), stderr: true) {
                $0.contains(expected)
            }
            #expect(try Self.current(env) == alice, "signed out by a \(forgery) SET")
        }
        // A real revocation, then alice signs in again: the same SET delivered again, and one
        // issued days before her new sign-in, are about the session that ended.
        _ = try await Self.post(env, "/test/revoke-sessions?username=\(alice)")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) { $0.contains("event processed") }
        // Replayed only once the original is acknowledged: the transmitter drops every copy of an acked jti.
        try await Self.waitUntilAcknowledged(env)
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        var mark = env.brokerd.process.stderrText.split(separator: "\n").count
        _ = try await Self.post(
            env, "/test/ssf/inject",
            json: #"{"username": "\#(alice)", "event": "session-revoked", "forgery": "replay"}"#)
        try env.brokerd.process.waitForLine(after: mark, timeout: .seconds(10), stderr: true) {
            $0.contains("delivered again is not acted on twice")
        }
        #expect(try Self.current(env) == alice, "signed out by a replayed SET")
        mark = env.brokerd.process.stderrText.split(separator: "\n").count
        _ = try await Self.post(
            env, "/test/ssf/inject",
            json: #"{"username": "\#(alice)", "event": "session-revoked", "forgery": "expired"}"#)
        try env.brokerd.process.waitForLine(after: mark, timeout: .seconds(10), stderr: true) {
            $0.contains("ended an earlier session")
        }
        #expect(try Self.current(env) == alice, "signed out by an old SET")
        #expect(!env.brokerd.process.stderrText.contains("eyJ"), "a token or SET in brokerd's log")
    }

    /// The acknowledgement of an event goes with the next poll, so a brokerd stopped before it
    /// gets the event again after its restart, when the person may have signed in again within
    /// the minute the provider's clock may lag: the event must not end that sign-in.
    @Test("an event acted on before a restart, delivered again after it, leaves the sign-in made since")
    func deliveredAgainAfterARestart() async throws {
        let directory = try TemporaryDirectory()
        let env = try await Self.receiving(configIn: directory)
        let alice = TestUsers.alice.username
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        _ = try await Self.post(env, "/test/revoke-sessions?username=\(alice)")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) { $0.contains("event processed") }
        #expect(try Self.current(env) == nil)
        try await Self.waitUntilAcknowledged(env)
        try env.restartBroker(extraArguments: ["--config", directory.path + "/broker.conf"])
        try env.brokerd.process.waitForLine(timeout: .seconds(15), stderr: true) {
            $0.contains("receiving Shared Signals")
        }
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        _ = try await Self.post(
            env, "/test/ssf/inject",
            json: #"{"username": "\#(alice)", "event": "session-revoked", "forgery": "replay"}"#)
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("delivered again an event brokerd acted on already")
        }
        #expect(try Self.current(env) == alice, "signed out by an event from before the restart")
    }

    @Test("a transmitter that fails, or loses the stream, is retried and shown; the stream resumes")
    func theStreamResumes() async throws {
        let env = try await Self.receiving()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        try await env.setProviderFault("unavailable", count: 3, endpoint: "ssf")
        try env.brokerd.process.waitForLine(timeout: .seconds(20), stderr: true) {
            $0.contains("the transmitter cannot be polled")
        }
        let shown = try Self.facts(env)[DeviceFact.sharedSignals] as? String ?? ""
        #expect(shown.contains("trying again") || shown.contains("polling"), "\(shown)")
        #expect(try Self.current(env) == TestUsers.alice.username)
        // The transmitter disables the stream: brokerd says so (it asks the status every tenth poll).
        _ = try await Self.post(
            env, "/test/ssf/stream-status", json: #"{"status": "disabled", "reason": "maintenance"}"#)
        try env.brokerd.process.waitForLine(timeout: .seconds(30), stderr: true) {
            $0.contains("the transmitter says the stream is not enabled")
        }
        let disabled = try Self.facts(env)[DeviceFact.sharedSignals] as? String ?? ""
        #expect(disabled.contains("disabled (maintenance)"), "\(disabled)")
        _ = try await Self.post(env, "/test/ssf/stream-status", json: #"{"status": "enabled"}"#)
        // The transmitter forgets every stream: brokerd makes a new one.
        _ = try await Self.post(env, "/test/ssf/delete-streams")
        try env.brokerd.process.waitForLine(timeout: .seconds(30), stderr: true, skipping: 1) {
            $0.contains("receiving Shared Signals")
        }
        _ = try await Self.post(env, "/test/revoke-sessions?username=\(TestUsers.alice.username)")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("signing the device out")
        }
        #expect(try Self.current(env) == nil)
    }

    @Test(
        "without a transmitter, the session check signs out a revoked session and keeps one the provider cannot check")
    func theSessionCheck() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.conf", #"{"sessionCheckSeconds": 1}"#)
        let env = try BrokerEnvironment(
            brokerArguments: ["--config", config], idpArguments: ["--without", "shared-signals"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        // With Native SSO the check exchanges the device secret: no refresh token is spent.
        let refreshes = try await env.tokenRequests("refresh_token")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) { $0.contains("session checked") }
        #expect(try await env.tokenRequests("refresh_token") == refreshes)
        let exchanges = (try await env.idpStats()["exchanges"] as? [String: Any])?["native-sso"] as? Int ?? 0
        #expect(exchanges >= 1)
        // The provider fails: the check cannot say, and nobody is signed out.
        try await env.setProviderFault("unavailable", count: 4)
        try env.brokerd.process.waitForLine(timeout: .seconds(30), stderr: true) {
            $0.contains("the provider could not say")
        }
        #expect(try Self.current(env) == TestUsers.alice.username)
        try await env.setProviderFault("none")
        _ = try await Self.post(env, "/test/revoke-sessions?username=\(TestUsers.alice.username)")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("signing the device out")
        }
        let after = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()
        #expect(after["current"] is NSNull, "\(after)")
        #expect((after["previous"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
    }

    @Test("CAE: a challenged token is renewed with the claims while the session holds, InteractionRequired after")
    func claimsChallenges() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.conf", #"{"clientCapabilities": ["cp1"]}"#)
        let env = try BrokerEnvironment(
            brokerArguments: ["--config", config], idpArguments: ["--without", "shared-signals"])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let last = try await HTTPClient.shared.send(.get(env.idp.baseURL + "/test/last-claims?client_id=mail-app"))
        #expect(last.bodyText.contains("cp1"), "clientCapabilities did not reach the provider: \(last.bodyText)")

        func token(_ extra: [String] = []) throws -> CommandResult {
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"] + extra)
        }
        func me(_ accessToken: String) async throws -> HTTPResponse {
            try await HTTPClient.shared.send(
                .get(env.idp.baseURL + "/v1.0/me", headers: [HTTPHeader("Authorization", "Bearer \(accessToken)")]))
        }
        func challenge(_ response: HTTPResponse) -> String? {
            guard let header = response.header("www-authenticate"), header.contains("insufficient_claims"),
                let start = header.range(of: "claims=\"")
            else { return nil }
            return String(header[start.upperBound...].prefix { $0 != "\"" })
        }
        let first = try token().json()["accessToken"] as? String ?? ""
        #expect(try await me(first).status == 200)

        // A policy change: the token is refused mid-life with a claims challenge.
        _ = try await Self.post(env, "/test/require-fresh-tokens?username=\(TestUsers.alice.username)")
        let refused = try await me(first)
        let claims = try #require(challenge(refused), "no claims challenge: \(refused.status)")
        // The cache would hand the same token: the claims make brokerd ask the provider.
        let renewed = try token(["--claims", claims]).json()["accessToken"] as? String ?? ""
        #expect(renewed != first)
        #expect(try await me(renewed).status == 200)

        // The session is revoked: the challenge cannot be met without the person.
        _ = try await Self.post(env, "/test/revoke-sessions?username=\(TestUsers.alice.username)")
        let challenged = try #require(challenge(try await me(renewed)))
        let denied = try token(["--claims", challenged])
        #expect(denied.status != 0 && denied.stderr.contains("InteractionRequired"), "\(denied.stderr)")
        #expect(denied.stderr.contains("AcquireTokenInteractive"), "\(denied.stderr)")

        // Claims that are no claims request are refused before anything is asked.
        let bad = try token(["--claims", "not json"])
        #expect(bad.status != 0 && bad.stderr.contains("InvalidArgument"), "\(bad.stderr)")
    }
}
