import BrokerAPI
import DBus
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// Sign-in flows from the side of a hostile or crashing app on the same desktop: flows whose
/// caller is gone end (their polling with it), one program cannot take every sign-in of the
/// device, flow ids are each caller's own, and a provider outage does not end a flow that a
/// person is still finishing. Real brokerd and idp-sim; the attacker is raw D-Bus connections.
@Suite("Hostile and crashing callers", .serialized)
struct HostileCallerTests {
    /// `StartSignIn` with the device-code method, sent on `connection`.
    private static func startDeviceSignIn(_ connection: DBusConnection, client: String = "mail-app") async throws
        -> [DBusValue]
    {
        try await connection.call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
            member: Broker1Method.startSignIn.rawValue,
            arguments: [
                .string(client), .string(""), .strings(["User.Read"]),
                .vardict([OptionKey.method: .variant(.string(SignInFlow.deviceCode.rawValue))]),
            ], timeout: .seconds(20))
    }

    /// idp-sim's count of `endpoint` requests (`devicecode`), or of device-code polls.
    private static func count(_ env: BrokerEnvironment, _ endpoint: String) async throws -> Int {
        (try await env.idpStats())[endpoint] as? Int ?? 0
    }

    @Test("40 connections that close while their 8 sign-ins each are at the provider leave no flow behind")
    func flowsOfCallersThatLeftEnd() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "1"]) }
        // Every start sits in its provider round trip while its caller goes away.
        try await env.setProviderFault("slow", count: 320, delayMs: 300, endpoint: "devicecode")
        for round in 0..<40 {
            let connection = try await offThePool { try DBusConnection(address: env.bus.address) }
            for _ in 0..<8 { Task { _ = try? await Self.startDeviceSignIn(connection) } }
            try await Task.sleep(for: .milliseconds(round % 7))  // the attacker's pace: 0-6 ms
            connection.close()
        }
        // Wait until every start that reached the provider has had its answer.
        var seen = -1
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let now = try await Self.count(env, "devicecode")
            if now == seen, now > 0 { break }
            seen = now
            try await Task.sleep(for: .seconds(1))  // the provider's 300 ms answers, twice over
        }
        #expect(seen > 0, "no start reached the provider")
        try await env.setProviderFault("none", endpoint: "devicecode")

        // Nobody is connected: nothing polls the provider.
        let polls = try await env.tokenRequests("urn:ietf:params:oauth:grant-type:device_code")
        try await Task.sleep(for: .seconds(3))  // three poll intervals, to see that none come
        #expect(try await env.tokenRequests("urn:ietf:params:oauth:grant-type:device_code") == polls)

        // And every way of signing in still works for the next app.
        let (ctl, uri, code) = try await offThePool { try DeviceCodeTests.start(env) }
        #expect(try await DeviceCodeTests.decide(uri, code: code, action: "approve") == 200)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.stderrText)")
        print("40 connections x 8 starts closed mid-flight: \(seen) reached the provider, 0 flows left, 0 polls")
    }

    @Test("one process cannot take every sign-in: 16 over all its connections, others still served")
    func oneProgramHasABound() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "5"]) }
        let connections = try await offThePool { try (0..<3).map { _ in try DBusConnection(address: env.bus.address) } }
        defer { for connection in connections { connection.close() } }
        var started = 0
        var refused: [String] = []
        for connection in connections {
            for _ in 0..<8 {
                do {
                    _ = try await Self.startDeviceSignIn(connection)
                    started += 1
                } catch let error as DBusError {
                    refused.append("\(error.name): \(error.message)")
                }
            }
        }
        #expect(started == 16, "\(refused)")
        #expect(refused.count == 8)
        #expect(refused.allSatisfy { $0.contains("LimitsExceeded") && $0.contains("this process") }, "\(refused)")
        // Another program (brokerctl) still gets a sign-in.
        let (ctl, _, _) = try await offThePool { try DeviceCodeTests.start(env) }
        ctl.kill()
    }

    @Test("flow ids are each caller's own: the same flowId in two apps, and one cancel ends only its own")
    func flowIdsArePerCaller() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let (first, second) = try await offThePool {
            (try DBusConnection(address: env.bus.address), try DBusConnection(address: env.bus.address))
        }
        defer {
            first.close()
            second.close()
        }
        func interactive(_ connection: DBusConnection) -> Task<String, Never> {
            Task {
                do {
                    _ = try await connection.call(
                        destination: BrokerNames.busName, path: BrokerNames.objectPath,
                        interface: BrokerNames.interface, member: Broker1Method.acquireTokenInteractive.rawValue,
                        arguments: [
                            .string("mail-app"), .strings(["User.Read"]),
                            .vardict([OptionKey.flowId: .variant(.string("shared-name"))]),
                        ], timeout: .seconds(30))
                    return "signed in"
                } catch let error as DBusError {
                    return error.name
                } catch {
                    return "\(error)"
                }
            }
        }
        let a = interactive(first)
        _ = try await env.browser.nextURL()
        // The same caller's flow id again, while its flow runs: refused before any page opens.
        #expect(await interactive(first).value == BrokerErrorCode.invalidArgument.dbusErrorName)
        let b = interactive(second)
        _ = try await env.browser.nextURL()  // no "already in progress" for the second app
        _ = try await second.call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
            member: Broker1Method.cancelSignIn.rawValue, arguments: [.string("shared-name")])
        #expect(await b.value == BrokerErrorCode.cancelled.dbusErrorName)
        // The first app's flow is untouched until it cancels it itself.
        _ = try await first.call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
            member: Broker1Method.cancelSignIn.rawValue, arguments: [.string("shared-name")])
        #expect(await a.value == BrokerErrorCode.cancelled.dbusErrorName)
    }

    @Test("300 new clientIds from one app: at most maxClients are remembered, the signed-in app keeps its tokens")
    func aFloodOfClientIdsIsBounded() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("broker.conf", #"{"maxClients": 50}"#)
        chmod(config, 0o600)
        let env = try await offThePool { try BrokerEnvironment(brokerArguments: ["--config", config]) }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let connection = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { connection.close() }
        for index in 0..<300 {
            // Each first call records what the app saw: a write of the whole state.
            _ = try await connection.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                member: Broker1Method.getCurrentAccount.rawValue, arguments: [.string("flood-\(index)")])
        }
        let clients = try env.stateFile()["clients"] as? [String: Any] ?? [:]
        let bystanders = clients.values.filter { ($0 as? [String: Any])?["refreshToken"] == nil }
        #expect(bystanders.count <= 50, "\(bystanders.count) clients without a sign-in remembered")
        #expect((clients["mail-app"] as? [String: Any])?["refreshToken"] != nil, "the signed-in app was kept")
        let token = try await offThePool {
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"])
        }
        #expect(token.status == 0, "\(token.stderr)")
    }

    @Test("a provider outage during a device-code sign-in is waited out; the person's approval still counts")
    func deviceCodeSurvivesAnOutage() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "1"]) }
        let (ctl, uri, code) = try await offThePool { try DeviceCodeTests.start(env) }
        // Enough 503s to exhaust the retries of several polls.
        try await env.setProviderFault("unavailable", count: 8)
        #expect(try await DeviceCodeTests.decide(uri, code: code, action: "approve") == 200)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(60)) } == 0, "\(ctl.stderrText)")
    }

    @Test("a provider outage while a person submits an email code keeps the flow; the same code then signs in")
    func emailCodeSurvivesAnOutage() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let flow = try await app.signIn(username: TestUsers.carol.username, scopes: ["User.Read"])
        let code = try #require(try await env.latestCode(for: TestUsers.carol.username))
        // More 503s than the retries of one token request: this submission meets the outage.
        try await env.setProviderFault("unavailable", count: 100)
        do {
            _ = try await flow.submitCode(code)
            Issue.record("the code was redeemed during the outage")
        } catch {
            #expect(error.code == .serverUnavailable, "\(error)")
        }
        try await env.setProviderFault("none")
        let result = try await flow.submitCode(code)
        #expect(result.account.username == TestUsers.carol.username)
    }
}
