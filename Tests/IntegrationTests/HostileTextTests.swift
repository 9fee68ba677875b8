import BrokerAPI
import DBus
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// Text from outside that D-Bus, a log or a terminal cannot take as it is: a provider's display
/// name with a NUL, a terminal escape, a bell and a right-to-left override; a state file with a
/// NUL; a caller's correlation id that would forge a log line. Each meets the one rule
/// (`OutsideText`) where it enters, and no app misses a change for it. Real brokerd, idp-sim and
/// brokerctl over a private bus.
@Suite("Text from outside: hostile names, state files and correlation ids", .serialized)
struct HostileTextTests {
    /// A user whose provider gives a display name with NUL, ESC (starting a colour sequence), BEL
    /// and a right-to-left override.
    static let mallory = (
        username: "mallory@contoso.example", password: "mallory-Passw0rd!",
        name: "Mallory\u{0}\u{1B}[31m\u{7}\u{202E}lanigiro"
    )
    /// Her name as the broker keeps and sends it: the controls replaced by U+FFFD, the override
    /// kept, as text that apps render.
    static let malloryReplaced = "Mallory\u{FFFD}\u{FFFD}[31m\u{FFFD}\u{202E}lanigiro"

    /// idp-sim's users file: the display name written with JSON's escapes, as a provider sends it.
    static let usersFile = """
        {"tenantId": "\(TestUsers.tenant)",
         "users": [{"username": "\(mallory.username)", "password": "\(mallory.password)",
                    "displayName": "Mallory\\u0000\\u001b[31m\\u0007\\u202elanigiro", "email": "\(mallory.username)"}],
         "clients": [\(TestUsers.clients.map { "{\"clientId\": \"\($0)\", \"family\": \"1\"}" }.joined(separator: ", "))]}
        """

    private static func application(_ env: BrokerEnvironment, _ clientId: String) throws -> PublicClientApplication {
        try PublicClientApplication(
            clientId: clientId, configuration: BrokerClientConfiguration(busAddress: env.bus.address))
    }

    /// Whether `text` holds a character that must not reach a terminal raw.
    private static func hasRawControl(_ text: String) -> Bool {
        text.unicodeScalars.contains { ["\u{0}", "\u{1B}", "\u{7}", "\u{202E}"].contains($0) }
    }

    @Test(
        "a display name with NUL, ESC, BEL and U+202E: three apps hear the sign-in and the sign-out, and read the name"
    )
    func hostileDisplayName() async throws {
        let env = try await offThePool { try BrokerEnvironment(usersFile: Self.usersFile) }
        // The provider really sends it: the ID token's `name` claim holds the NUL.
        let apps = try TestUsers.clients.map { try Self.application(env, $0) }
        var recorders: [ChangeRecorder] = []
        var consumers: [Task<Void, Never>] = []
        for app in apps {
            let recorder = ChangeRecorder()
            consumers.append(recorder.record(try await app.subscribeToAccountChanges()))
            recorders.append(recorder)
        }
        defer { for consumer in consumers { consumer.cancel() } }

        let result = try await apps[0].signIn(
            username: Self.mallory.username, password: Self.mallory.password, scopes: ["User.Read"])
        #expect(result.account.name == Self.malloryReplaced)
        let idToken = try #require(result.idToken)
        #expect(try JWT.claims(idToken)["name"] as? String == Self.mallory.name, "idp-sim sent the name as it is")

        for (clientId, recorder) in zip(TestUsers.clients, recorders) {
            let change = await recorder.next { $0.reason == .signedIn }
            #expect(change?.current?.name == Self.malloryReplaced, "\(clientId) heard the sign-in")
        }
        for (clientId, app) in zip(TestUsers.clients, apps) {
            #expect(try await app.currentAccount().current?.name == Self.malloryReplaced, "\(clientId)")
            #expect(try await app.accounts().map(\.name) == [Self.malloryReplaced], "\(clientId)")
        }

        // brokerctl's text shows the override escaped and nothing raw; --json keeps the exact value.
        let text = try await offThePool { try env.brokerctl(["current-account", "--client-id", "notes-app"]) }
        #expect(text.status == 0, "\(text.stderr)")
        #expect(!Self.hasRawControl(text.stdout), "\(text.stdout.debugDescription)")
        #expect(text.stdout.contains("Mallory\u{FFFD}\u{FFFD}[31m\u{FFFD}\\u{202E}lanigiro"), "\(text.stdout)")
        let json = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "notes-app", "--json"])
        }
        #expect((try json.json()["current"] as? [String: Any])?["name"] as? String == Self.malloryReplaced)

        // What was written is what brokerd reads again: a restart keeps her, nothing moved aside.
        var log = env.brokerd.process.stderrText
        try await offThePool { try env.restartBroker() }
        #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory).isEmpty)
        #expect(try await apps[2].currentAccount().current?.name == Self.malloryReplaced)

        try await apps[1].signOut(account: nil)
        for (clientId, recorder) in zip(TestUsers.clients, recorders) {
            let change = await recorder.next { $0.reason == .signedOut }
            #expect(change?.current == nil && change?.previous?.name == Self.malloryReplaced, "\(clientId)")
        }
        for (clientId, app) in zip(TestUsers.clients, apps) {
            let seen = try await app.currentAccount()
            #expect(seen.current == nil, "\(clientId)")
        }
        log += env.brokerd.process.stderrText
        #expect(!log.contains("could not emit") && !log.contains("Cannot build"), "\(log)")
    }

    @Test("a state file with a NUL in an account's name is moved aside; every app queries a signed-out broker")
    func stateFileWithNUL() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        #expect(try env.brokerd.stop() == 0)
        let path = env.stateDirectory + "/state.json"
        let state = CrashRecoveryTests.StateFiles.validState.replacing("Alice Example", with: #"Alice\u0000Example"#)
        try Data(state.utf8).write(to: URL(fileURLWithPath: path))
        #expect(chmod(path, 0o600) == 0)
        try await offThePool { try env.restartBroker() }

        let log = env.brokerd.process.stderrText
        #expect(log.contains("the saved state cannot be used; starting signed out"), "\(log)")
        #expect(log.contains("holds U+0000, a control character, at character 6"), "\(log)")
        #expect(StateFileSnapshot.brokenFiles(in: env.stateDirectory).count == 1)
        for clientId in TestUsers.clients {
            let app = try Self.application(env, clientId)
            let seen = try await app.currentAccount()
            #expect(seen.current == nil && seen.previous == nil, "\(clientId)")
            #expect(try await app.accounts().isEmpty, "\(clientId)")
        }
    }

    @Test("a Microsoft-protocol correlation id with a newline, a forged priority and ESC forges no log line")
    func correlationIdInTheLog() async throws {
        let files = try TemporaryDirectory()
        let config = try files.write("broker.json", #"{"compatibility": ["microsoft-broker1"]}"#)
        let arguments = ["--config", config]
        let env = try await offThePool { try BrokerEnvironment(brokerArguments: arguments) }
        let hostile = "\n<2>critical forged \u{1B}[2J\u{1B}]0;owned\u{7}"
        let escaped = #"\u{0A}<2>critical forged \u{1B}[2J\u{1B}]0;owned\u{07}"#

        func callBoth() async throws {
            let connection = try await offThePool { try DBusConnection(address: env.bus.address) }
            defer { connection.close() }
            // An accepted request and a refused one: each is logged with the correlation id.
            for request in [#"{"clientId": "mail-app"}"#, "not JSON"] {
                let reply = try await connection.call(
                    destination: MicrosoftBroker1Names.busName, path: MicrosoftBroker1Names.objectPath,
                    interface: MicrosoftBroker1Names.interface, member: MicrosoftBroker1Method.getAccounts.rawValue,
                    arguments: [.string("0.0"), .string(hostile), .string(request)], timeout: .seconds(30))
                let text = try #require(reply.first?.string)
                #expect(!Self.hasRawControl(text) && !text.contains("\n"), "\(text.debugDescription)")
            }
        }

        // swift-log's standard handler, as brokerd logs on a terminal or a pipe.
        try await callBoth()
        var process = env.brokerd.process
        try process.waitForLine(stderr: true) { $0.contains("Microsoft broker protocol call refused") }
        #expect(process.stderrLines.filter { $0.contains(escaped) }.count == 2, "\(process.stderrText)")
        #expect(!process.stderrLines.contains { $0.contains("critical forged") && !$0.contains(escaped) })
        #expect(!process.stderrText.unicodeScalars.contains("\u{1B}"), "a raw ESC in brokerd's log")

        // The journal's handler, where a line starting with <2> is an entry of priority critical.
        #expect(try env.brokerd.stop() == 0)
        let script = #"JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$@""#
        process = try ChildProcess(
            "brokerd", executable: "/bin/sh",
            arguments: [
                "-c", script, "sh", Binaries.path("brokerd"), "--address", env.bus.address,
                "--authority", env.idp.authority, "--state-dir", env.stateDirectory, "--token-storage", "memory",
                "--log-level", "debug",
            ] + arguments)
        defer {
            process.signal(SIGTERM)
            _ = try? process.waitForExit(timeout: .seconds(10))
        }
        try process.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("brokerd ready:") }
        try await callBoth()
        try process.waitForLine(stderr: true) { $0.contains("Microsoft broker protocol call refused") }
        #expect(process.stderrLines.filter { $0.contains(escaped) }.count == 2, "\(process.stderrText)")
        for line in process.stderrLines {
            #expect(line.range(of: #"^<[2-7]>[A-Za-z-]+: "#, options: .regularExpression) != nil, "\(line)")
            #expect(!line.hasPrefix("<2>critical"), "a forged entry: \(line)")
        }
        #expect(!process.stderrText.unicodeScalars.contains("\u{1B}"), "a raw ESC in brokerd's log")
    }
}
