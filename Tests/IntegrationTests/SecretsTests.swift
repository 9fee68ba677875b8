import Foundation
import HTTP
import TestSupport
import Testing

/// No token, code, password or refresh token ever leaves the broker except in the reply to the
/// caller that asked for it: not in a signal, a property, introspection, a log line at any level,
/// or an error message.
@Suite("Secrets stay secret")
struct SecretsTests {
    @Test("full flows at trace level: no secret in brokerd's logs, signals, properties, introspection or errors")
    func noSecretLeaks() async throws {
        let env = try BrokerEnvironment(brokerArguments: ["--log-level", "trace"])
        let alice = TestUsers.alice
        let carol = TestUsers.carol.username
        let signals = try ChildProcess(
            "dbus-monitor", executable: "/usr/bin/dbus-monitor",
            arguments: ["--address", env.bus.address, "type='signal'"])
        let watcher = try env.watch()
        var secrets: Set<String> = [alice.password]
        var messages: [String] = []  // everything a caller was told besides its own results

        // A wrong password, then the right one; tokens silently and by refresh.
        let wrongPassword = "Wr0ng-" + UUID().uuidString
        secrets.insert(wrongPassword)
        messages.append(try env.signIn((alice.username, wrongPassword, ""), client: "mail-app").stderr)
        let signedIn = try env.signIn(alice, client: "mail-app")
        let tokenRuns = [
            signedIn,
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"]),
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh", "--json"]
            ),
            // Single sign-on: the device secret goes to the provider, the app gets its own tokens.
            try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read", "--json"]),
        ]
        for run in tokenRuns {
            let result = try run.json()
            secrets.formUnion(
                [result["accessToken"], result["idToken"]].compactMap { $0 as? String }.filter { !$0.isEmpty })
        }
        secrets.formUnion(try refreshTokens(in: env.stateDirectory))
        messages.append(try env.brokerctl(["me", "--client-id", "mail-app"]).stderr)
        messages.append(
            try env.brokerctl(["sign-in", "--client-id", "notes-app", "--username", carol, "--code-stdin"], stdin: "")
                .stderr)

        // Properties and introspection while signed in.
        let properties = try env.gdbusCallInterface(
            "org.freedesktop.DBus.Properties.GetAll", ["io.shareddevice.Broker1"])
        let introspection = try env.gdbusCallInterface("org.freedesktop.DBus.Introspectable.Introspect", [])
        #expect(properties.status == 0 && introspection.status == 0)

        // Sign out from the browser (the ID token goes to the provider as id_token_hint), then the code flow.
        messages.append(try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--from-browser"]).stderr)
        try await env.browser.visit(try await env.browser.nextURL())
        let codeRun = try env.startBrokerctl([
            "sign-in", "--client-id", "mail-app", "--username", carol, "--code-stdin",
        ])
        try codeRun.waitForLine(stderr: true) { $0.contains("code was sent") }
        let code = try #require(try await env.latestCode(for: carol))
        let wrongCode = ClientLibraryTests.wrongCode(than: code)
        try codeRun.type(wrongCode)
        try codeRun.waitForLine(stderr: true) { $0.contains("InvalidCode") }
        try codeRun.type(code)
        #expect(try codeRun.finish(timeout: .seconds(20)) == 0, "\(codeRun.allOutput)")
        secrets.formUnion([code, wrongCode])
        messages.append(codeRun.stderrText)
        secrets.formUnion(try refreshTokens(in: env.stateDirectory))

        // Interactive: the authorization code and the PKCE verifier travel only between browser, broker and provider.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        // Shared mode ends the browser session on every sign-out: the browser loads the end-session page.
        try await env.browser.visit(try await env.browser.nextURL())
        let interactive = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive", "--json"])
        try await env.browser.signIn(
            at: try await env.browser.nextURL(), username: alice.username, password: alice.password)
        #expect(try interactive.waitForExit(timeout: .seconds(20)) == 0, "\(interactive.allOutput)")
        let interactiveResult = try CommandResult(status: 0, stdout: interactive.stdoutText, stderr: "").json()
        secrets.formUnion(
            [interactiveResult["accessToken"], interactiveResult["idToken"]].compactMap { $0 as? String })
        for url in env.browser.visitedURLs {
            for item in URLComponents(string: url)?.queryItems ?? [] where item.name == "code" {
                secrets.insert(item.value ?? "")
            }
        }
        secrets.formUnion(try refreshTokens(in: env.stateDirectory))
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        _ = try env.brokerd.stop()

        secrets.remove("")
        let logs = env.brokerd.process.allOutput
        let places: [(String, String)] = [
            ("brokerd's logs", logs), ("signals (dbus-monitor)", signals.allOutput),
            ("brokerctl watch", watcher.allOutput),
            ("properties", properties.stdout), ("introspection", introspection.stdout),
            ("error messages", messages.joined(separator: "\n")),
        ]
        #expect(secrets.count >= 12, "too few secrets collected to mean anything: \(secrets.count)")
        #expect(logs.contains(" trace ") || logs.contains(" debug "), "brokerd did not log verbosely")
        for (place, text) in places {
            for secret in secrets {
                // A JWT's signature alone is as telling as the whole token.
                let fragments =
                    [secret]
                    + (secret.split(separator: ".").count == 3 ? [String(secret.split(separator: ".")[2])] : [])
                for fragment in fragments where text.contains(fragment) {
                    Issue.record("a secret (\(fragment.prefix(6))…, \(fragment.count) characters) appears in \(place)")
                }
            }
        }
        print(
            "secrets checked: \(secrets.count) in \(places.count) places; brokerd logged "
                + "\(logs.split(separator: "\n").count) lines at trace level"
        )
    }

    /// The refresh tokens and device secrets in brokerd's state file, whatever their place in it.
    private func refreshTokens(in stateDirectory: String) throws -> Set<String> {
        let state = try StateOnDisk.json(in: stateDirectory) ?? [:]
        var found: Set<String> = []
        func walk(_ value: Any, key: String?) {
            if let dictionary = value as? [String: Any] {
                for (k, v) in dictionary { walk(v, key: k) }
            } else if let array = value as? [Any] {
                for v in array { walk(v, key: key) }
            } else if let string = value as? String, !string.isEmpty,
                key?.lowercased().contains("refresh") == true || key == "deviceSecret"
            {
                found.insert(string)
            }
        }
        walk(state, key: nil)
        return found
    }
}
