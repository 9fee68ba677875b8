import Foundation
import TestSupport
import Testing

/// The examples, run as a person (or `make demo`) runs them.
@Suite("Examples: the multi-app demo, the ported tutorial app, the Python and GJS clients", .serialized)
struct ExamplesTests {
    /// The repository's `examples/` directory.
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples").path

    @Test("the multi-app sign-out demo passes: every app sees every change, and it cleans up")
    func multiAppDemo() throws {
        let demo = try ChildProcess(
            "multi-app-demo", executable: Binaries.path("multi-app-demo"),
            arguments: [
                "--bin-dir", Binaries.directory, "--users", Self.examples + "/demo-users.json",
            ])
        let status = try demo.waitForExit(timeout: .seconds(60))
        #expect(status == 0, "\(demo.allOutput)")
        let output = demo.stdoutText
        for app in ["Mail", "Calendar", "Notes"] {
            #expect(output.contains("[\(app)] ") && output.contains("now shows alice@contoso.example"), "\(output)")
            #expect(
                demo.stdoutLines.contains { $0.hasPrefix("[\(app)]") && $0.contains("now shows nobody") }, "\(output)")
        }
        #expect(output.contains("Every app saw every change."))
        // Single sign-on: the two apps that never signed in got tokens of their own, and Graph took them.
        for app in ["Calendar", "Notes"] {
            #expect(
                demo.stdoutLines.contains {
                    $0.hasPrefix("[\(app)]") && $0.contains("got a token of its own silently")
                        && $0.contains("Graph /v1.0/me says Alice Demo")
                }, "\(output)")
        }
        #expect(
            demo.stdoutLines.filter { $0.contains("gets no token: io.shareddevice.Broker1.Error.NoAccount") }.count
                == 3, "\(output)")
        // Nothing it started is left: every pid it printed is gone.
        for line in demo.stdoutLines {
            guard let range = line.range(of: "(pid "), let end = line[range.upperBound...].firstIndex(of: ")"),
                let pid = Int32(line[range.upperBound..<end])
            else { continue }
            #expect(kill(pid, 0) != 0, "process \(pid) is still running")
        }
    }

    @Test(
        "the tutorial app, from a script: sign in, call Graph, signed out elsewhere, interactive fallback, email code")
    func tutorialApp() async throws {
        let env = try BrokerEnvironment()
        let app = try ChildProcess(
            "tutorial-app", executable: Binaries.path("tutorial-app"),
            arguments: [
                "--client-id", "mail-app", "--address", env.bus.address,
            ], keepStdinOpen: true)
        try app.waitForLine { $0 == "current account: none" }

        var mark = app.mark
        try app.type("device")
        try app.waitForLine(after: mark) { $0 == "device mode: shared" }

        mark = app.mark
        try app.type("signin-password \(TestUsers.alice.username)")
        try app.type(TestUsers.alice.password)
        let signedInLine = try app.waitForLine(after: mark) {
            $0 == "signed in: \(TestUsers.alice.username)" || $0.hasPrefix("error")
        }
        #expect(signedInLine == "signed in: \(TestUsers.alice.username)", "\(app.allOutput)")

        mark = app.mark
        try app.type("graph")
        let graph = try app.waitForLine(after: mark) { $0.hasPrefix("graph:") || $0.hasPrefix("error") }
        #expect(
            graph == "graph: displayName=\(TestUsers.alice.name) userPrincipalName=\(TestUsers.alice.username)",
            "\(app.allOutput)")

        // Another app signs the device out; the tutorial app learns it on its next load. The
        // browser loads the provider's end-session page (shared mode's browserSignOut).
        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)
        try await env.browser.visit(try await env.browser.nextURL())
        mark = app.mark
        try app.type("refresh")
        try app.waitForLine(after: mark) { $0 == "account \(TestUsers.alice.username) has been signed out" }
        mark = app.mark
        try app.type("refresh")
        try app.waitForLine(after: mark) { $0 == "current account: none" }

        // Calling Graph with nobody signed in goes the tutorial's way: the browser, where the
        // person signs in; then Graph.
        mark = app.mark
        try app.type("graph")
        try app.waitForLine(after: mark) {
            $0.hasPrefix("nobody is signed in: signing in interactively") || $0.hasPrefix("error")
        }
        try await env.browser.signIn(
            at: try await env.browser.nextURL(), username: TestUsers.alice.username,
            password: TestUsers.alice.password)
        try app.waitForLine(after: mark) {
            $0 == "token acquired interactively for \(TestUsers.alice.username)" || $0.hasPrefix("error")
        }
        let profile = try app.waitForLine(after: mark) { $0.hasPrefix("graph:") || $0.hasPrefix("error") }
        #expect(profile.hasPrefix("graph: displayName=\(TestUsers.alice.name)"), "\(app.allOutput)")

        // Sign-out on a shared device also ends the browser session.
        mark = app.mark
        try app.type("signout")
        try app.waitForLine(after: mark) { $0.hasPrefix("signed out") || $0.hasPrefix("error") }
        try await env.browser.visit(try await env.browser.nextURL())
        #expect(!env.browser.hasCookies(for: env.idp.baseURL))

        // The email one-time code: a wrong code, then the right one.
        mark = app.mark
        try app.type("signin-code \(TestUsers.carol.username)")
        try app.waitForLine(after: mark) { $0.hasPrefix("code sent to") || $0.hasPrefix("error") }
        let code = try #require(try await env.latestCode(for: TestUsers.carol.username))
        try app.type(ClientLibraryTests.wrongCode(than: code))
        try app.waitForLine(after: mark) { $0 == "wrong code, try again" || $0.hasPrefix("error") }
        try app.type(code)
        let signedIn = try app.waitForLine(after: mark) { $0.hasPrefix("signed in:") || $0.hasPrefix("error") }
        #expect(signedIn == "signed in: \(TestUsers.carol.username)", "\(app.allOutput)")

        // Signed in through another app: the tutorial's "Call Graph" works at once, with a token
        // of its own (single sign-on), no sign-in of its own and no browser.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        #expect(try env.signIn(TestUsers.alice, client: "notes-app").status == 0)
        let opened = env.browser.openedCount
        mark = app.mark
        try app.type("graph")
        let viaSSO = try app.waitForLine(after: mark) {
            $0.hasPrefix("graph:") || $0.hasPrefix("error") || $0.hasPrefix("nobody")
        }
        #expect(
            viaSSO == "graph: displayName=\(TestUsers.alice.name) userPrincipalName=\(TestUsers.alice.username)",
            "\(app.allOutput)")
        #expect(env.browser.openedCount == opened)

        try app.type("quit")
        #expect(try app.finish() == 0)
    }

    static var pythonClientAvailable: Bool {
        guard
            let process = try? ChildProcess(
                "python3", executable: "/usr/bin/python3",
                arguments: ["-c", "import dbus, dbus.mainloop.glib; from gi.repository import GLib"]),
            let status = try? process.waitForExit(timeout: .seconds(20))
        else { return false }
        return status == 0
    }

    @Test(
        "the Python client reads the broker and hears AccountChanged",
        .enabled(if: ExamplesTests.pythonClientAvailable, "needs Debian's python3-dbus and python3-gi"))
    func pythonClient() throws {
        let env = try BrokerEnvironment()
        let client = try ChildProcess(
            "broker_client.py", executable: "/usr/bin/python3",
            arguments: [
                Self.examples + "/python/broker_client.py", "--address", env.bus.address, "--client-id", "mail-app",
                "--timeout", "20",
            ])
        try client.waitForLine(timeout: .seconds(15)) { $0 == "waiting for AccountChanged" }
        #expect(client.stdoutLines.contains("device mode: shared"))
        #expect(client.stdoutLines.contains("current account: none"))
        #expect(try env.signIn(TestUsers.alice, client: "notes-app").status == 0)
        try client.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("AccountChanged:") }
        #expect(try client.waitForExit(timeout: .seconds(10)) == 0)
        #expect(
            client.stdoutLines.contains("AccountChanged: signed-in current=\(TestUsers.alice.username) previous=none"))
    }

    /// Debian's `gjs` (in the Makefile's packages); without it the test is skipped, saying so.
    static var gjsAvailable: Bool { access("/usr/bin/gjs", X_OK) == 0 }

    @Test(
        "the GJS client (Gio.DBusProxy) reads the broker, hears AccountChanged, and shows a broker error",
        .enabled(if: ExamplesTests.gjsAvailable, "needs /usr/bin/gjs: sudo apt-get install gjs (make deps does)"))
    func gjsClient() throws {
        let env = try BrokerEnvironment()
        let script = Self.examples + "/gjs/broker_client.js"
        let client = try ChildProcess(
            "broker_client.js", executable: "/usr/bin/gjs",
            arguments: ["-m", script, "--address", env.bus.address, "--client-id", "mail-app", "--timeout", "20"])
        try client.waitForLine(timeout: .seconds(15)) { $0 == "waiting for AccountChanged" }
        #expect(client.stdoutLines.contains("device mode: shared"), "\(client.allOutput)")
        #expect(client.stdoutLines.contains("current account: none"), "\(client.allOutput)")
        #expect(try env.signIn(TestUsers.alice, client: "notes-app").status == 0)
        try client.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("AccountChanged:") }
        #expect(try client.waitForExit(timeout: .seconds(10)) == 0, "\(client.allOutput)")
        #expect(
            client.stdoutLines.contains("AccountChanged: signed-in current=\(TestUsers.alice.username) previous=none"),
            "\(client.allOutput)")

        // A broker error reaches the app with its D-Bus name.
        let refused = try ChildProcess(
            "broker_client.js", executable: "/usr/bin/gjs",
            arguments: ["-m", script, "--address", env.bus.address, "--client-id", ""])
        #expect(try refused.waitForExit(timeout: .seconds(15)) == 1)
        #expect(
            refused.stdoutLines.contains { $0.hasPrefix("error: io.shareddevice.Broker1.Error.InvalidArgument: ") },
            "\(refused.allOutput)")
    }
}
