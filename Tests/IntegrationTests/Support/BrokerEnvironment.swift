import BrokerAPI
import Foundation
import HTTP
import TestSupport

/// The users and apps every integration test signs in with.
enum TestUsers {
    static let tenant = "contoso-tenant"
    static let alice = (username: "alice@contoso.example", password: "alice-Passw0rd!", name: "Alice Example")
    static let bob = (username: "bob@contoso.example", password: "bob-Passw0rd!", name: "Bob Example")
    /// Has no password: the provider signs her in with an emailed one-time code (or in the browser, never).
    static let carol = (username: "carol@contoso.example", name: "Carol Example")
    static let clients = ["mail-app", "calendar-app", "notes-app"]
    /// More apps, for single sign-on with many at once.
    static let ssoApps = (1...10).map { "sso-app-\($0)" }
    /// Confidential clients: idp-sim knows their secrets; brokerd learns them from its --config file.
    static let confidentialClients = [
        (clientId: "backoffice-basic", secret: "basic-S3cret"),
        (clientId: "backoffice-post", secret: "post-S3cret"),
    ]

    /// A directory id of Entra's kind (a GUID), for clients that parse the account's realm as one.
    static let guidTenant = "8d6c0f2a-3b1e-4c5d-9e7f-a1b2c3d4e5f6"

    static var usersFile: String { usersFile(tenant: tenant) }

    static func usersFile(tenant: String) -> String {
        """
        {"tenantId": "\(tenant)",
         "users": [
           {"username": "\(alice.username)", "password": "\(alice.password)", "displayName": "\(alice.name)", "email": "\(alice.username)"},
           {"username": "\(bob.username)", "password": "\(bob.password)", "displayName": "\(bob.name)", "email": "\(bob.username)"},
           {"username": "\(carol.username)", "displayName": "\(carol.name)", "email": "\(carol.username)", "authMethods": ["emailOtp"]}
         ],
         "clients": [\(((clients + ssoApps).map { "{\"clientId\": \"\($0)\", \"family\": \"1\"}" }
                        + confidentialClients.map { "{\"clientId\": \"\($0.clientId)\", \"clientSecret\": \"\($0.secret)\"}" })
                       .joined(separator: ", "))]}
        """
    }
}

extension IdpSim {
    /// idp-sim with the integration tests' users and apps.
    convenience init(in directory: TemporaryDirectory, tenant: String = TestUsers.tenant, extraArguments: [String] = [])
        throws
    {
        try self.init(
            in: directory, users: TestUsers.usersFile(tenant: tenant), tenant: tenant, extraArguments: extraArguments)
    }
}

/// A running `brokerd` on a private bus.
final class Brokerd: @unchecked Sendable {
    let process: ChildProcess

    /// Starts brokerd and waits for its readiness line. `browser` is its `$BROWSER`; `environment`
    /// adds to (or overrides) the test's own.
    /// Tokens stay in state.json (`--token-storage plaintext-file`) unless `extraArguments` gives
    /// another `--token-storage` (the last one given wins).
    init(
        bus: PrivateBus, authority: String, stateDirectory: String, mode: String = "shared",
        browser: String, extraArguments: [String] = [], environment: [String: String] = [:]
    ) throws {
        let arguments =
            [
                "--address", bus.address, "--device-mode", mode, "--authority", authority,
                "--state-dir", stateDirectory, "--log-level", "debug", "--token-storage", "plaintext-file",
            ] + extraArguments
        process = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"), arguments: arguments,
            environment: ["BROWSER": browser].merging(environment) { $1 })
        try process.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("brokerd ready:") }
        // The readiness line is on standard output, the log on standard error, read by another
        // thread: a test reading the start's log waits for the last line brokerd logs before it
        // is ready ("serving", at info), so that every earlier one is in.
        let level = arguments.lastIndex(of: "--log-level").flatMap {
            arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil
        }
        if ["trace", "debug", "info"].contains(level ?? "info") {
            try process.waitForLine(timeout: .seconds(10), stderr: true) { $0.contains("] serving") }
        }
    }

    /// SIGTERM, and waits for a clean exit.
    func stop() throws -> Int32 {
        process.signal(SIGTERM)
        return try process.waitForExit(timeout: .seconds(10))
    }
}

/// A bus, an identity provider and a broker: the whole product on one machine.
final class BrokerEnvironment: @unchecked Sendable {
    let directory: TemporaryDirectory
    let bus: PrivateBus
    let idp: IdpSim
    /// The browser brokerd opens pages in; never the developer's own.
    let browser: TestBrowser
    private(set) var brokerd: Brokerd
    let stateDirectory: String
    let mode: String
    /// What brokerd's environment adds to the test's.
    let brokerEnvironment: [String: String]

    /// `busConfig`, when given, is the text of the private bus's configuration file; `usersFile`,
    /// idp-sim's users and apps instead of ``TestUsers``'.
    init(
        mode: String = "shared", brokerArguments: [String] = [], idpArguments: [String] = [], busConfig: String? = nil,
        brokerEnvironment: [String: String] = [:], tenant: String = TestUsers.tenant, usersFile: String? = nil
    ) throws {
        let directory = try TemporaryDirectory()
        self.directory = directory
        stateDirectory = directory.path + "/state"
        self.mode = mode
        self.brokerEnvironment = brokerEnvironment
        bus = try PrivateBus(configFile: try busConfig.map { try directory.write("bus.conf", $0) })
        idp = try IdpSim(
            in: directory, users: usersFile ?? TestUsers.usersFile(tenant: tenant), tenant: tenant,
            extraArguments: idpArguments)
        browser = try TestBrowser(in: directory)
        brokerd = try Brokerd(
            bus: bus, authority: idp.authority, stateDirectory: stateDirectory, mode: mode,
            browser: browser.command, extraArguments: brokerArguments, environment: brokerEnvironment)
    }

    /// Stops brokerd cleanly and starts a new one on the same state.
    func restartBroker(extraArguments: [String] = []) throws {
        _ = try brokerd.stop()
        brokerd = try Brokerd(
            bus: bus, authority: idp.authority, stateDirectory: stateDirectory, mode: mode,
            browser: browser.command, extraArguments: extraArguments, environment: brokerEnvironment)
    }

    /// Starts `brokerctl ARGS --address BUS` with standard input open, for a test to type into.
    func startBrokerctl(_ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            "brokerctl", executable: Binaries.path("brokerctl"),
            arguments: arguments + ["--address", bus.address], keepStdinOpen: true)
    }

    /// The newest one-time code idp-sim "sent" to `username`, from its test outbox.
    func latestCode(for username: String) async throws -> String? {
        try await outbox().last { $0["username"] as? String == username }?["code"] as? String
    }

    /// idp-sim's test outbox: every code it "sent", oldest first.
    func outbox() async throws -> [[String: Any]] {
        let response = try await HTTPClient.shared.send(.get(idp.baseURL + "/test/outbox"))
        return try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]] ?? []
    }

    /// Sets an idp-sim fault (`POST /test/faults`), on the token endpoint unless `endpoint` names another.
    func setProviderFault(_ mode: String, count: Int? = nil, delayMs: Int? = nil, endpoint: String? = nil) async throws
    {
        let body =
            "{\"mode\": \"\(mode)\"" + (count.map { ", \"count\": \($0)" } ?? "")
            + (delayMs.map { ", \"delayMs\": \($0)" } ?? "") + (endpoint.map { ", \"endpoint\": \"\($0)\"" } ?? "")
            + "}"
        let request = HTTPRequest(
            method: "POST", url: idp.baseURL + "/test/faults",
            headers: [HTTPHeader("Content-Type", "application/json")], body: Array(body.utf8))
        let response = try await HTTPClient.shared.send(request)
        guard response.status == 200 else {
            throw ProcessFailure("setting the fault \(mode) failed: \(response.status) \(response.bodyText)")
        }
    }

    /// How many token requests of `grantType` idp-sim has answered.
    func tokenRequests(_ grantType: String) async throws -> Int {
        ((try await idpStats())["token"] as? [String: Any])?[grantType] as? Int ?? 0
    }

    /// Runs `brokerctl ARGS --address BUS` to completion (bounded).
    func brokerctl(_ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(30)) throws
        -> CommandResult
    {
        let process = try ChildProcess(
            "brokerctl", executable: Binaries.path("brokerctl"),
            arguments: arguments + ["--address", bus.address], stdin: stdin)
        let status = try process.waitForExit(timeout: timeout)
        return CommandResult(status: status, stdout: process.stdoutText, stderr: process.stderrText)
    }

    /// Starts `brokerctl watch --json` and waits until it is subscribed.
    func watch() throws -> ChildProcess {
        let process = try ChildProcess(
            "brokerctl watch", executable: Binaries.path("brokerctl"),
            arguments: ["watch", "--address", bus.address])
        try process.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("watching") }
        return process
    }

    /// Signs a user in with a password through brokerctl, asserting success.
    @discardableResult
    func signIn(
        _ user: (username: String, password: String, name: String), client: String,
        scopes: [String] = ["User.Read"]
    ) throws -> CommandResult {
        try brokerctl(
            ["sign-in", "--client-id", client, "--username", user.username, "--password-stdin", "--json"]
                + scopes.flatMap { ["--scope", $0] }, stdin: user.password + "\n")
    }

    /// Runs `gdbus call` of a broker method on the private bus (a client that is not ours).
    func gdbusCall(_ method: Broker1Method, _ arguments: [String]) throws -> CommandResult {
        try gdbusCallInterface("\(BrokerNames.interface).\(method.rawValue)", arguments)
    }

    /// Runs `gdbus call` of `interface.Method` on the broker's object (Properties, Introspectable, ...).
    func gdbusCallInterface(_ method: String, _ arguments: [String]) throws -> CommandResult {
        let process = try ChildProcess(
            "gdbus", executable: "/usr/bin/gdbus",
            arguments: [
                "call", "--address", bus.address, "--dest", "io.shareddevice.Broker1",
                "--object-path", "/io/shareddevice/Broker1", "--method", method,
            ] + arguments)
        let status = try process.waitForExit(timeout: .seconds(20))
        return CommandResult(status: status, stdout: process.stdoutText, stderr: process.stderrText)
    }

    /// The idp-sim's `/test/stats` counters, as JSON, read over real HTTP with the project's client.
    func idpStats() async throws -> [String: Any] {
        let response = try await HTTPClient.shared.send(.get(idp.baseURL + "/test/stats"))
        return (try JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
    }
}

extension CommandResult {
    /// stdout as a JSON object.
    func json() throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any] else {
            throw ProcessFailure("not a JSON object: \(stdout)")
        }
        return object
    }
}
