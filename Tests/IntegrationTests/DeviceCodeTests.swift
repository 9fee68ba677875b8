import Foundation
import HTTP
import TestSupport
import Testing

/// The device authorization grant (RFC 8628): `brokerctl sign-in --device-code` shows an address
/// and a code, a person signs in there on another device (here the test posts idp-sim's page as
/// a browser would), and the broker, polling at the pace the provider asks, signs the device in.
///
/// The waits here last seconds, so each runs off Swift's small thread pool (`offThePool`): other
/// suites measure their own brokerd's responsiveness on that pool meanwhile.
@Suite("Device-code sign-in", .serialized)
struct DeviceCodeTests {
    /// Starts the sign-in and returns brokerctl with the address and code it printed.
    static func start(_ env: BrokerEnvironment) throws -> (ChildProcess, uri: String, code: String) {
        let ctl = try env.startBrokerctl([
            "sign-in", "--client-id", "mail-app", "--device-code", "--json", "--scope", "User.Read",
        ])
        let line = try ctl.waitForLine(timeout: .seconds(15), stderr: true) { $0.hasPrefix("To sign in, open ") }
        let words = line.split(separator: " ")
        let uri = try #require(words.first { $0.hasPrefix("http") }.map(String.init))
        let code = try #require(words.last.map(String.init))
        return (ctl, uri, code)
    }

    /// The verification page's form, as a person's browser posts it.
    static func decide(_ uri: String, code: String, action: String) async throws -> Int {
        let user = TestUsers.alice
        let response = try await HTTPClient.shared.send(
            .postForm(
                uri,
                fields: [
                    ("user_code", code), ("username", user.username), ("password", user.password),
                    ("action", action),
                ]))
        return response.status
    }

    @Test("approved on the page: the device is signed in, AccountChanged, and brokerctl prints the result")
    func approved() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "1"]) }
        let (ctl, uri, code) = try await offThePool { try Self.start(env) }
        #expect(code.count == 8, "\(code)")
        #expect(try await Self.decide(uri, code: code, action: "approve") == 200)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.stderrText)")
        let result = try JSONSerialization.jsonObject(with: Data(ctl.stdoutText.utf8)) as? [String: Any]
        #expect((result?["account"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        let current = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"])
        }.json()
        #expect((current["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
    }

    @Test("slow_down is honoured: the next poll comes 5 s later, and no sooner")
    func slowDown() async throws {
        let env = try await offThePool {
            try BrokerEnvironment(idpArguments: ["--device-code-interval", "1", "--device-code-slow-down", "1"])
        }
        // Counted from before the flow starts: its polls are timed from its start, which a loaded
        // machine may take a second to report.
        let started = ContinuousClock.now
        let (ctl, uri, code) = try await offThePool { try Self.start(env) }
        #expect(try await Self.decide(uri, code: code, action: "approve") == 200)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(30)) } == 0, "\(ctl.stderrText)")
        // One poll at 1 s answered slow_down, the next at 1 + 6 s signs in: two in all.
        #expect(try await env.tokenRequests("urn:ietf:params:oauth:grant-type:device_code") == 2)
        #expect(ContinuousClock.now - started >= .seconds(6))
    }

    @Test("denied on the page: AccessDenied; nobody signs in in time: CodeExpired; no device endpoint: NotSupported")
    func deniedExpiredOrNotOffered() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "1"]) }
        let (denied, uri, code) = try await offThePool { try Self.start(env) }
        #expect(try await Self.decide(uri, code: code, action: "deny") == 200)
        #expect(try await offThePool { try denied.waitForExit(timeout: .seconds(20)) } == 1)
        #expect(denied.stderrText.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(denied.stderrText)")

        let short = try await offThePool {
            try BrokerEnvironment(idpArguments: ["--device-code-interval", "1", "--device-code-lifetime", "2"])
        }
        let (expired, _, _) = try await offThePool { try Self.start(short) }
        #expect(try await offThePool { try expired.waitForExit(timeout: .seconds(20)) } == 1)
        #expect(expired.stderrText.contains("io.shareddevice.Broker1.Error.CodeExpired"), "\(expired.stderrText)")
        #expect(
            try await offThePool { try short.brokerctl(["current-account", "--client-id", "mail-app", "--json"]) }
                .json()["current"] is NSNull)

        let plain = try await offThePool { try BrokerEnvironment(idpArguments: ["--without", "device-code"]) }
        let refused = try await offThePool {
            try plain.brokerctl(["sign-in", "--client-id", "mail-app", "--device-code"])
        }
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.NotSupported"), "\(refused.stderr)")
        #expect(refused.stderr.contains("device_authorization_endpoint"), "\(refused.stderr)")
    }
}
