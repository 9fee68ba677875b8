import BrokerAPI
import DBus
import Foundation
import Locking
import TestSupport
import Testing

/// Crashes the fuzzing found (docs/reliability.md, "Fuzzing"), each reproduced end to end with
/// the real brokerd: a failing test until the guard is in Sources, a regression test after.
@Suite("Crash reproductions found by fuzzing", .serialized)
struct CrashReproductionTests {
    /// BrokerCore/Broker.swift `cachedToken`: an expiry of Int64.min made the first silent request
    /// trap (an overflow in the expiry check) when the state file (or the Secret Service item) held it; found with the
    /// `statefile` harness (fuzz/regressions/statefile/expires-on-int64-min.json), fixed in f9f4cab.
    /// State files no longer hold access tokens (format 2), but a version 1 file still can: it is
    /// read, its tokens dropped, and the request refreshes instead of trapping.
    @Test("a version 1 state file whose token expires at Int64.min: brokerd reads it and the silent request refreshes")
    func stateFileExpiryAtInt64Min() async throws {
        let environment = try await offThePool { try BrokerEnvironment() }
        let signIn = try await offThePool { try environment.signIn(TestUsers.alice, client: "mail-app") }
        try #require(signIn.status == 0, "\(signIn.stderr)")
        _ = try await offThePool { try environment.brokerd.stop() }

        // The format 2 file, turned back into version 1: whole accounts in each client, and an
        // access token expiring at Int64.min.
        let path = environment.stateDirectory + "/state.json"
        var state = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        let accounts = try #require(state.removeValue(forKey: "accounts") as? [String: Any])
        var clients = try #require(state["clients"] as? [String: [String: Any]])
        for (clientId, var client) in clients {
            for field in ["account", "lastSeen"] {
                if let key = client[field] as? String { client[field] = accounts[key] }
            }
            client["accessTokens"] = [
                "user.read": [
                    "accessToken": "at-stored", "expiresOn": NSNumber(value: Int64.min),
                    "scopes": ["user.read"],
                ]
            ]
            clients[clientId] = client
        }
        state["clients"] = clients
        state["version"] = 1
        try JSONSerialization.data(withJSONObject: state, options: [.sortedKeys]).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        try await offThePool { try environment.restartBroker() }

        let connection = try await offThePool { try DBusConnection(address: environment.bus.address) }
        defer { connection.close() }
        let outcome = await Self.call(
            connection, Broker1Method.acquireTokenSilent.rawValue,
            [.string("mail-app"), .strings(["User.Read"]), .string(""), .vardict([:])])
        guard case .success(let values) = outcome else {
            Issue.record("the silent request failed: \(outcome)")
            return
        }
        let token = values.first?.vardict?["accessToken"]?.string
        #expect(token != nil && token != "at-stored", "the stored token of version 1 must not be served")
        #expect(await Self.answers(connection), "brokerd died: \(Self.crashReport(environment.brokerd.process))")
    }

    /// A provider's `expires_in` at the edges of Int64, as a string (JSONValue.int64 reads strings
    /// with Int64(_:)). First found by reading Identity/OIDCProvider.swift, where
    /// `clock.now() + max(0, expiresIn)` trapped on "9223372036854775807" (since fixed in the
    /// working tree with a one-year cap and addingReportingOverflow); then the libFuzzer target
    /// `token` found that the new guard in Identity/JSONValue.swift, `abs($0) < 9e15` on the
    /// parsed string, traps on "-9223372036854775808" (abs of Int64.min). A provider, or whoever
    /// answers in its place, stops brokerd with one token response. The control, 3600, shows the
    /// fake provider is otherwise acceptable.
    @Test(
        "a token response with expires_in at the edges of Int64 must not crash brokerd",
        arguments: [#""9223372036854775807""#, #""-9223372036854775808""#, "-9223372036854775808", "3600"])
    func providerExpiresInAtInt64Edges(expiresIn: String) async throws {
        let directory = try TemporaryDirectory()
        let bus = try await offThePool { try PrivateBus() }
        let provider = try await offThePool {
            try HostileProvider(
                in: directory,
                tokenResponse: """
                    {"access_token": "at-1", "token_type": "Bearer", "expires_in": \(expiresIn), "refresh_token": "rt-1"}
                    """)
        }
        let brokerd = try await offThePool {
            try Brokerd(
                bus: bus, authority: provider.authority, stateDirectory: directory.path + "/state",
                browser: "/bin/true",
                extraArguments: ["--allow-password-grant"])
        }
        let connection = try await offThePool { try DBusConnection(address: bus.address) }
        defer { connection.close() }
        let outcome = await Self.call(
            connection, Broker1Method.signInWithPassword.rawValue,
            [.string("mail-app"), .string("eve@example.com"), .string("pw"), .strings(["User.Read"])])
        #expect(await Self.answers(connection), "brokerd died: \(Self.crashReport(brokerd.process))")
        switch outcome {
        case .success(let values):
            #expect(values.first?.vardict?["account"]?.vardict?["username"]?.string == "eve@example.com")
        case .failure(let error):
            #expect(error.name.hasPrefix(BrokerNames.errorPrefix), "\(error)")
            #expect(expiresIn != "3600", "the control sign-in failed: \(error)")
        }
    }

    /// Whether brokerd still answers a Ping (a crashed one may not have exited yet: its
    /// backtracer is still writing).
    static func answers(_ connection: DBusConnection) async -> Bool {
        do {
            _ = try await connection.call(
                destination: Fuzz.service, path: Fuzz.path, interface: Fuzz.peer, member: "Ping",
                timeout: .seconds(10))
            return true
        } catch {
            return false
        }
    }

    /// The lines of a crashed process's output that say where it crashed.
    static func crashReport(_ process: ChildProcess) -> String {
        let lines = process.stderrLines.filter {
            $0.contains("Fatal error") || $0.contains("crashed") || $0.contains("Sources/")
        }
        return lines.prefix(6).joined(separator: "\n")
    }

    static func call(_ connection: DBusConnection, _ member: String, _ arguments: [DBusValue]) async -> Result<
        [DBusValue], DBusError
    > {
        do {
            return .success(
                try await connection.call(
                    destination: Fuzz.service, path: Fuzz.path, interface: Fuzz.interface,
                    member: member, arguments: arguments, timeout: .seconds(15)))
        } catch let error as DBusError {
            return .failure(error)
        } catch {
            return .failure(DBusError(name: "test.NotADBusError", message: "\(error)"))
        }
    }

}

/// A minimal OpenID Connect provider on the loopback that answers every password grant with a
/// fixed token response (no ID token, so the broker asks userinfo who signed in), and 404 to
/// everything else, native authentication included.
final class HostileProvider: @unchecked Sendable {
    let process: ChildProcess
    let authority: String

    init(in directory: TemporaryDirectory, tokenResponse: String) throws {
        let script = try directory.write(
            "hostile_provider.py",
            #"""
            import http.server, json, sys
            TOKEN = sys.argv[1].encode()
            class Handler(http.server.BaseHTTPRequestHandler):
                def log_message(self, *args): pass
                def answer(self, status, body):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                def do_GET(self):
                    base = "http://127.0.0.1:%d/t/v2.0" % self.server.server_port
                    if self.path == "/t/v2.0/.well-known/openid-configuration":
                        self.answer(200, json.dumps({"issuer": base, "token_endpoint": base + "/token",
                                                     "userinfo_endpoint": base + "/userinfo"}).encode())
                    elif self.path == "/t/v2.0/userinfo":
                        self.answer(200, b'{"sub": "eve", "preferred_username": "eve@example.com", "name": "Eve"}')
                    else:
                        self.answer(404, b'{"error": "not_found"}')
                def do_POST(self):
                    self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    if self.path == "/t/v2.0/token":
                        self.answer(200, TOKEN)
                    else:
                        self.answer(404, b'{"error": "not_found"}')
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            print("listening on http://127.0.0.1:%d" % server.server_port, flush=True)
            server.serve_forever()
            """#)
        process = try ChildProcess(
            "hostile provider", executable: "/usr/bin/python3", arguments: [script, tokenResponse])
        let line = try process.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("listening on ") }
        authority = String(line.dropFirst("listening on ".count)).trimmingCharacters(in: .whitespaces) + "/t/v2.0"
    }
}
