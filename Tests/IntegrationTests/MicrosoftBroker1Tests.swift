import BrokerAPI
import DBus
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// `com.microsoft.identity.broker1`, Microsoft's Linux broker protocol, served by brokerd over the
/// same state as its own interface: a client written from the protocol document alone
/// (Tests/Compatibility, Python with dbus-python) checks every method and shape, and these tests
/// the paths it cannot drive (the browser, a name someone else owns, thousands of malformed
/// requests). Real brokerd and idp-sim over a private bus; the provider's tenant is a GUID, as
/// Entra's are.
@Suite("Microsoft's broker protocol, served by brokerd", .serialized)
struct MicrosoftBroker1Tests {
    /// A broker serving the protocol because its configuration file says so, with the
    /// provider's tenant as the device's.
    private func environment(extraArguments: [String] = [], idpArguments: [String] = []) async throws -> (
        BrokerEnvironment, TemporaryDirectory
    ) {
        let files = try TemporaryDirectory()
        let config = try files.write(
            "broker.json", #"{"tenantId": "\#(TestUsers.guidTenant)", "compatibility": ["microsoft-broker1"]}"#)
        let env = try await offThePool {
            try BrokerEnvironment(
                brokerArguments: ["--config", config, "--interactive-timeout", "20"] + extraArguments,
                idpArguments: idpArguments, tenant: TestUsers.guidTenant)
        }
        return (env, files)
    }

    /// Calls `method` with `request` on a connection of the test's own; the reply's JSON object.
    private func call(_ connection: DBusConnection, _ method: MicrosoftBroker1Method, _ request: String) async throws
        -> [String: Any]
    {
        try object(try await callText(connection, method, request))
    }

    private func callText(_ connection: DBusConnection, _ method: MicrosoftBroker1Method, _ request: String)
        async throws -> String
    {
        let reply = try await connection.call(
            destination: MicrosoftBroker1Names.busName, path: MicrosoftBroker1Names.objectPath,
            interface: MicrosoftBroker1Names.interface, member: method.rawValue,
            arguments: [.string("0.0"), .string(UUID().uuidString), .string(request)], timeout: .seconds(60))
        return try #require(reply.first?.string)
    }

    private func object(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "\(text)")
    }

    private func connect(_ env: BrokerEnvironment) async throws -> DBusConnection {
        try await offThePool { try DBusConnection(address: env.bus.address) }
    }

    /// The error object of a reply, wherever the protocol puts it.
    private func errorObject(_ reply: [String: Any]) -> [String: Any]? {
        (reply["error"] as? [String: Any])
            ?? ((reply["brokerTokenResponse"] as? [String: Any])?["error"] as? [String: Any])
    }

    @Test("a client written from the protocol document alone passes every check against brokerd")
    func independentClient() async throws {
        let (env, _) = try await environment()
        let client = try ChildProcess(
            "microsoft_broker1_client.py", executable: "/usr/bin/python3",
            arguments: [
                Repository.root + "/Tests/Compatibility/microsoft_broker1_client.py", "--address", env.bus.address,
                "--idp-base-url", env.idp.baseURL, "--username", TestUsers.alice.username, "--password",
                TestUsers.alice.password, "--other-username", TestUsers.bob.username, "--other-password",
                TestUsers.bob.password, "--client-id", "mail-app", "--other-client-id", "calendar-app",
            ])
        let status = try await offThePool { try client.waitForExit(timeout: .seconds(180)) }
        #expect(status == 0, "\(client.stdoutText)\n\(client.stderrText)")
        #expect(!client.stdoutText.contains("not ok"), "\(client.stdoutText)")
        let passed = client.stdoutLines.filter { $0.hasPrefix("ok ") }.count
        #expect(passed >= 70 && client.stdoutText.contains("checks, 0 failed"), "\(client.stdoutText)")
        // What brokerd logged of it carries no token.
        #expect(!env.brokerd.process.stderrText.contains("eyJ"), "a token in brokerd's log")
    }

    @Test("an interactive sign-in through the protocol is the device's account on the native interface at once")
    func interactiveAcrossInterfaces() async throws {
        let (env, _) = try await environment()
        let connection = try await connect(env)
        defer { connection.close() }
        let request = """
            {"authParameters": {"clientId": "mail-app", "redirectUri": "mail-app", "authorizationType": 6,
             "authority": "https://login.microsoftonline.com/common", "requestedScopes": ["User.Read"],
             "prompt": "select_account", "username": "\(TestUsers.alice.username)", "parentWindowHandle": 0}}
            """
        let reply = Task { try await callText(connection, .acquireTokenInteractively, request) }
        let page = try await env.browser.nextProviderURL()
        #expect(page.contains("login_hint="), "\(page)")
        _ = try await env.browser.signIn(
            at: page, username: TestUsers.alice.username, password: TestUsers.alice.password)
        let tokens = try #require(try object(try await reply.value)["brokerTokenResponse"] as? [String: Any])
        #expect((tokens["account"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)

        let app = try PublicClientApplication(
            clientId: "notes-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        #expect(try await app.currentAccount().current?.username == TestUsers.alice.username)

        // Someone else, while Alice is signed in: an error the client can show (UserSwitch).
        let other = Task {
            try await callText(
                connection, .acquireTokenInteractively,
                request.replacing(TestUsers.alice.username, with: TestUsers.bob.username)
                    .replacing("select_account", with: "login"))
        }
        _ = try await env.browser.signIn(
            at: try await env.browser.nextURL(), username: TestUsers.bob.username, password: TestUsers.bob.password)
        let refused = try object(try await other.value)
        #expect(errorObject(refused)?["status"] as? Int == 12, "\(refused)")
        #expect(try await app.currentAccount().current?.username == TestUsers.alice.username)
    }

    @Test("off unless asked; a name another program owns stays theirs, and brokerd serves its own interface")
    func nameTakenOrNotAsked() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let bus = try await connect(env)
        defer { bus.close() }
        func owned() async throws -> Bool {
            try await bus.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameHasOwner", arguments: [.string(MicrosoftBroker1Names.busName)]
            ).first?.bool == true
        }
        #expect(try await !owned(), "served although not asked")

        // Microsoft's broker (here: this test) holds the name when brokerd starts with --compat.
        #expect(try await bus.requestName(MicrosoftBroker1Names.busName) == .primaryOwner)
        try await offThePool { try env.restartBroker(extraArguments: ["--compat", "microsoft-broker1"]) }
        let logged = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("another program owns the name")
            }
        }
        #expect(logged.contains(bus.uniqueName), "\(logged)")
        let info = try await offThePool { try env.brokerctl(["device-info", "--json"]) }
        #expect(info.status == 0)
        let facts = try info.json()["extraDeviceInformation"] as? [String: String]
        #expect(facts?[DeviceFact.compatibility] == nil, "\(info.stdout)")
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)

        // Once the other broker is gone, a restarted brokerd takes the name and says so.
        try await bus.releaseName(MicrosoftBroker1Names.busName)
        try await offThePool { try env.restartBroker(extraArguments: ["--compat", "microsoft-broker1"]) }
        let served = try await offThePool { try env.brokerctl(["device-info", "--json"]) }
        let servedFacts = try served.json()["extraDeviceInformation"] as? [String: String]
        #expect(servedFacts?[DeviceFact.compatibility] == MicrosoftBroker1Names.busName, "\(served.stdout)")
        let accounts = try await call(bus, .getAccounts, #"{"clientId": "calendar-app"}"#)
        #expect((accounts["accounts"] as? [[String: Any]])?.first?["username"] as? String == TestUsers.alice.username)
    }

    /// A provider without single sign-on: with one, the wider token comes silently (ScopeRuleTests).
    @Test("scopes beyond the grant: status 2, so the app goes interactive, and the grant still serves its own")
    func scopesBeyondTheGrant() async throws {
        let (env, _) = try await environment(idpArguments: SingleSignOnTests.plainProvider)
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let connection = try await connect(env)
        defer { connection.close() }
        func silent(_ scope: String) async throws -> [String: Any] {
            try await call(
                connection, .acquireTokenSilently,
                #"{"authParameters": {"clientId": "mail-app", "requestedScopes": ["\#(scope)"], "account": null}}"#)
        }
        let wider = try await silent("Mail.Read")
        #expect(errorObject(wider)?["status"] as? Int == 2, "\(wider)")
        // The refused refresh spent nothing: a forced refresh of the granted scope works, twice.
        for _ in 0..<2 {
            let refreshed = try await offThePool {
                try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"])
            }
            #expect(refreshed.status == 0, "\(refreshed.stderr)")
        }
        #expect((try await silent("User.Read")["brokerTokenResponse"] as? [String: Any])?["accessToken"] is String)
    }

    @Test("the native interface's caller checks: a clientId bound to another program is refused, as status 9")
    func callerChecks() async throws {
        let files = try TemporaryDirectory()
        let config = try files.write(
            "broker.json",
            """
            {"compatibility": ["microsoft-broker1"],
             "clients": [{"clientId": "mail-app", "allowedExecutables": ["\(Binaries.path("brokerctl"))"]},
                         {"clientId": "calendar-app"}]}
            """)
        let env = try await offThePool { try BrokerEnvironment(brokerArguments: ["--config", config]) }
        let connection = try await connect(env)
        defer { connection.close() }
        let bound = try await call(connection, .getAccounts, #"{"clientId": "mail-app"}"#)
        #expect(errorObject(bound)?["status"] as? Int == 9, "\(bound)")
        #expect((errorObject(bound)?["context"] as? String)?.contains("mail-app") == true, "\(bound)")
        let unknown = try await call(
            connection, .acquireTokenSilently, #"{"authParameters": {"clientId": "notes-app", "requestedScopes": []}}"#)
        #expect(errorObject(unknown)?["status"] as? Int == 9, "\(unknown)")
        let free = try await call(connection, .getAccounts, #"{"clientId": "calendar-app"}"#)
        #expect(free["accounts"] as? [Any] != nil, "\(free)")
    }

    @Test("2,400 malformed requests over the bus: each answered with status 6, the broker's state unchanged")
    func malformedRequests() async throws {
        let (env, _) = try await environment()
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let before = StateOnDisk.bytes(in: env.stateDirectory)
        let connection = try await connect(env)
        defer { connection.close() }

        var generator = SeededGenerator(seed: 0x5EED)
        let requests = MalformedRequests.make(count: 300, using: &generator)
        var answered = 0
        for method in MicrosoftBroker1Method.allCases {
            for request in requests {
                let reply = try await call(connection, method, request)
                let status = errorObject(reply)?["status"] as? Int
                #expect(status == 6, "\(method.rawValue) answered \(reply) to \(request.prefix(200))")
                answered += 1
            }
        }
        #expect(answered >= 2_000)
        #expect(StateOnDisk.bytes(in: env.stateDirectory) == before, "the state files changed")
        let accounts = try await call(connection, .getAccounts, #"{"clientId": "mail-app"}"#)
        #expect((accounts["accounts"] as? [[String: Any]])?.count == 1)
        #expect(env.brokerd.process.isRunning)
    }
}

/// Requests no client of the protocol may send: not JSON, not an object, the right keys with the
/// wrong types, or too large; each made from a valid request, so that they look like the real ones.
enum MalformedRequests {
    static var valid: [String: Any] {
        [
            "authParameters": [
                "clientId": "mail-app", "redirectUri": "mail-app", "authorizationType": 1,
                "authority": "https://login.microsoftonline.com/common", "requestedScopes": ["User.Read"],
                "account": ["homeAccountId": "a.b", "username": "alice@contoso.example"],
            ] as [String: Any],
            "clientId": "mail-app",
        ]
    }

    static func make(count: Int, using generator: inout SeededGenerator) -> [String] {
        let text = String(
            decoding: (try? JSONSerialization.data(withJSONObject: valid, options: [.sortedKeys])) ?? Data(),
            as: UTF8.self)
        let wrongValues: [Any] = [7, true, ["x"], ["k": "v"], 1.5]
        var made: [String] = []
        while made.count < count {
            switch made.count % 6 {
            case 0:
                // Cut short: never valid JSON.
                made.append(String(text.prefix(Int.random(in: 1..<text.count - 1, using: &generator))))
            case 1:
                // clientId of another type.
                var request = valid
                var parameters = valid["authParameters"] as? [String: Any] ?? [:]
                parameters["clientId"] = wrongValues.randomElement(using: &generator)
                request["authParameters"] = parameters
                request["clientId"] = parameters["clientId"]
                made.append(serialized(request))
            case 2:
                // requestedScopes, account or authParameters of another type.
                var request = valid
                var parameters = valid["authParameters"] as? [String: Any] ?? [:]
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: parameters["requestedScopes"] = [7, "x"].shuffled(using: &generator) + ["y"]
                case 1: parameters["account"] = ["alice", 7, true].randomElement(using: &generator)
                default: request["authParameters"] = ["x", 7, ["y"]].randomElement(using: &generator)
                }
                if request["authParameters"] is [String: Any] { request["authParameters"] = parameters }
                made.append(serialized(request))
            case 3:
                // Not an object.
                made.append(
                    ["[]", "null", "\"mail-app\"", "42", "[\(text)]", "true"].randomElement(using: &generator) ?? "[]")
            case 4:
                // Random printable bytes (D-Bus strings are UTF-8 without NUL).
                let length = Int.random(in: 0..<64, using: &generator)
                made.append(
                    String(
                        (0..<length).map { _ in Character(Unicode.Scalar(UInt8.random(in: 32...126, using: &generator)))
                        }))
            default:
                // Too large, or nested deeper than any request.
                if Bool.random(using: &generator) {
                    made.append(#"{"clientId": "mail-app", "pad": ""# + String(repeating: "x", count: 70_000) + #""}"#)
                } else {
                    let depth = Int.random(in: 600..<2_000, using: &generator)
                    made.append(String(repeating: "[", count: depth) + String(repeating: "]", count: depth))
                }
            }
        }
        return made
    }

    private static func serialized(_ object: [String: Any]) -> String {
        String(
            decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(),
            as: UTF8.self)
    }
}
