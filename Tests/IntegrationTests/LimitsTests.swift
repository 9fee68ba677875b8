import BrokerAPI
import DBus
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// A caller that floods the broker gets `LimitsExceeded`, not a broker that grows without bound;
/// one app that floods it (many connections, many processes) uses up only its own share, and
/// every other app still signs in, gets tokens and signs out.
@Suite("Limits on what one caller may hold")
struct LimitsTests {
    /// Another app (brokerctl), beside a flood: a device-code sign-in, a token, a sign-out, a
    /// password sign-in, each served.
    static func anotherAppIsServed(_ env: BrokerEnvironment) async throws {
        let (ctl, uri, code) = try await offThePool { try DeviceCodeTests.start(env) }
        #expect(try await DeviceCodeTests.decide(uri, code: code, action: "approve") == 200)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
        let token = try await offThePool { try env.brokerctl(["token", "--client-id", "notes-app"]) }
        #expect(token.status == 0, "\(token.stderr)")
        let signOut = try await offThePool { try env.brokerctl(["sign-out", "--client-id", "notes-app"]) }
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(try await offThePool { try env.signIn(TestUsers.bob, client: "calendar-app") }.status == 0)
    }

    @Test("one connection with 300 calls in flight: 256 are served, 44 get LimitsExceeded, and the broker goes on")
    func callsInFlightPerConnection() async throws {
        let env = try BrokerEnvironment()
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        // A slow refresh holds every call (they share it) until all 300 have arrived.
        try await env.setProviderFault("slow", count: 1, delayMs: 1500)
        let outcomes = await withTaskGroup(of: BrokerError?.self) { group in
            for _ in 0..<300 {
                group.addTask { await Self.forceRefresh(app) }
            }
            return await group.reduce(into: [BrokerError?]()) { $0.append($1) }
        }
        let refused = outcomes.compactMap { $0 }
        #expect(outcomes.filter { $0 == nil }.count == 256)
        #expect(refused.count == 44)
        #expect(refused.allSatisfy { $0.code == BrokerErrorCode.limitsExceeded }, "\(refused.map { $0.errorName })")
        #expect(refused.first?.message.contains("256 calls in flight") == true, "\(refused.first?.message ?? "")")
        print(
            "300 calls in flight on one connection: \(outcomes.count - refused.count) served, \(refused.count) "
                + "refused with LimitsExceeded"
        )

        // The slots came back: the same connection is served again, and so is everyone else.
        _ = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"]))
        #expect(try env.brokerctl(["current-account", "--client-id", "notes-app"]).status == 0)
    }

    /// A silent token that skips the cache; nil when it came, the error otherwise.
    private static func forceRefresh(_ app: PublicClientApplication) async -> BrokerError? {
        do throws(BrokerError) {
            _ = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"], forceRefresh: true))
            return nil
        } catch {
            return error
        }
    }

    /// An app of many processes, each opening `connections` connections and starting `flows`
    /// device-code sign-ins on each; prints "started N refused M", then holds them (standard
    /// input open) until killed.
    private static let flooder = """
        import sys, dbus, dbus.bus
        address, name, path, interface, client = sys.argv[1:6]
        connections, flows = int(sys.argv[6]), int(sys.argv[7])
        held = [dbus.bus.BusConnection(address) for _ in range(connections)]
        started = refused = 0
        for connection in held:
            for _ in range(flows):
                try:
                    connection.call_blocking(
                        name, path, interface, "StartSignIn", "ssasa{sv}",
                        [client, "", ["User.Read"], {"method": dbus.String("device-code", variant_level=1)}],
                        timeout=20)
                    started += 1
                except dbus.exceptions.DBusException as error:
                    if not error.get_dbus_name().endswith(".LimitsExceeded"):
                        raise
                    refused += 1
        print("started %d refused %d" % (started, refused), flush=True)
        sys.stdin.read()
        """

    @Test(
        "17 processes of one program, 16 device-code sign-ins each: it gets 32; another app signs in and out",
        .enabled(if: ExamplesTests.pythonClientAvailable, "needs Debian's python3-dbus"))
    func oneProgramOfManyProcessesTakesOnlyItsShare() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "2"]) }
        let script = try env.directory.write("flooder.py", Self.flooder)
        let began = ContinuousClock.now
        // 17 x 16 = 272: more than the device's 256.
        let processes = try (0..<17).map { index in
            try ChildProcess(
                "flooder \(index)", executable: "/usr/bin/python3",
                arguments: [
                    script, env.bus.address, BrokerNames.busName, BrokerNames.objectPath, BrokerNames.interface,
                    "mail-app", "2", "8",
                ], keepStdinOpen: true)
        }
        defer { for process in processes { process.kill() } }
        var started = 0
        var refused = 0
        for process in processes {
            let line = try await offThePool {
                try process.waitForLine(timeout: .seconds(60)) { $0.hasPrefix("started") }
            }
            let words = line.split(separator: " ")
            started += Int(words[1]) ?? 0
            refused += Int(words[3]) ?? 0
        }
        let flooded = ContinuousClock.now - began
        #expect(started == 32, "one program holds its share and no more")
        #expect(refused == 17 * 16 - started)

        // Another app: a device-code sign-in, a token, a sign-out, a password sign-in.
        try await Self.anotherAppIsServed(env)
        print(
            "17 processes of one program asked for 272 sign-ins in \(flooded): \(started) started, \(refused) "
                + "refused; another app then signed in, got a token and signed out")
    }

    @Test(
        "16 connections x 256 waiting calls: the program gets 1024, SignOut still passes, another app signs in")
    func oneProgramsWaitingCallsTakeOnlyItsShare() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--device-code-interval", "2"]) }
        let connections = try await offThePool {
            try (0..<16).map { _ in try DBusConnection(address: env.bus.address) }
        }
        defer { for connection in connections { connection.close() } }
        let (outcomes, seen) = AsyncStream.makeStream(of: String.self)
        let began = ContinuousClock.now
        // Every connection's flow first (16, this process's bound), then the flood of waits on them.
        var flowIds: [String] = []
        for connection in connections {
            let reply = try await connection.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                member: Broker1Method.startSignIn.rawValue,
                arguments: [
                    .string("mail-app"), .string(""), .strings(["User.Read"]),
                    .vardict([OptionKey.method: .variant(.string(SignInFlow.deviceCode.rawValue))]),
                ], timeout: .seconds(20))
            flowIds.append(try #require(reply.first?.string))
        }
        for (connection, flowId) in zip(connections, flowIds) {
            for _ in 0..<256 {
                Task {
                    do {
                        _ = try await connection.call(
                            destination: BrokerNames.busName, path: BrokerNames.objectPath,
                            interface: BrokerNames.interface, member: Broker1Method.finishSignIn.rawValue,
                            arguments: [.string(flowId)], timeout: .seconds(60))
                        seen.yield("answered")
                    } catch let error as DBusError {
                        seen.yield(error.name)
                    } catch {
                        seen.yield("\(error)")
                    }
                }
            }
        }
        // The flood's refusals come at once; the calls admitted wait for a person who never comes.
        let limitsExceeded = BrokerErrorCode.limitsExceeded.dbusErrorName
        let counting = Task {
            var refused = 0
            var other: [String] = []
            for await outcome in outcomes {
                if outcome == limitsExceeded { refused += 1 } else { other.append(outcome) }
                if refused == 4096 - 1024 { break }
            }
            return (refused, other)
        }
        let deadline = Task {
            try await Task.sleep(for: .seconds(20))
            seen.finish()
        }
        let (refused, other) = await counting.value
        deadline.cancel()
        let flooded = ContinuousClock.now - began
        #expect(refused == 4096 - 1024, "\(other.prefix(5))")
        #expect(other.isEmpty, "\(other.prefix(5))")

        // The flooding app's own connection is full, and SignOut and a read still pass on it.
        let flooder = connections[0]
        do {
            _ = try await flooder.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                member: Broker1Method.signOut.rawValue, arguments: [.string("mail-app"), .string(""), .vardict([:])],
                timeout: .seconds(20))
            Issue.record("a sign-out with nobody signed in succeeded")
        } catch let error as DBusError {
            // Served: nobody is signed in, which is the sign-out's own answer.
            #expect(error.name == BrokerErrorCode.noAccount.dbusErrorName, "\(error)")
        }
        _ = try await flooder.call(
            destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
            member: Broker1Method.getAccounts.rawValue, arguments: [.string("mail-app")], timeout: .seconds(20))

        try await Self.anotherAppIsServed(env)
        print(
            "one process sent 4096 waiting calls over 16 connections in \(flooded): \(4096 - refused) admitted, "
                + "\(refused) refused; another app then signed in, got a token and signed out")
    }
}
