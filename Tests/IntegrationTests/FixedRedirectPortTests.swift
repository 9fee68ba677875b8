import Foundation
import TestSupport
import Testing

/// `loopbackRedirectPorts`: a provider that matches `redirect_uri` exactly (idp-sim with
/// `--exact-redirect-uris`) signs in only through a port registered with it; a port another program
/// holds, or a range every sign-in has taken, ends the sign-in at once with a message naming the
/// ports and the key, never on another port. Fixed ports below the kernel's ephemeral range, so
/// that no outgoing connection of the machine holds them by chance; serialized, as each is one.
@Suite("Fixed loopback redirect ports", .serialized)
struct FixedRedirectPortTests {
    /// The integration tests' users and apps, mail-app with `http://127.0.0.1:PORT/` registered.
    private static func usersFile(registering port: UInt16) -> String {
        TestUsers.usersFile.replacingOccurrences(
            of: #"{"clientId": "mail-app", "family": "1"}"#,
            with: #"{"clientId": "mail-app", "family": "1", "redirectUris": ["http://127.0.0.1:\#(port)/"]}"#)
    }

    /// A `--config` file in `directory` with `loopbackRedirectPorts` set to `ports` (JSON as written).
    private static func configuration(_ ports: String, in directory: TemporaryDirectory) throws -> String {
        try directory.write("broker.json", #"{"loopbackRedirectPorts": \#(ports)}"#)
    }

    /// The `redirect_uri` of the provider's URL behind `start`.
    private static func redirectURI(behind start: String, _ env: BrokerEnvironment) async throws -> String {
        let url = try await env.browser.providerURL(behind: start)
        return try #require(
            URLComponents(string: url)?.queryItems?.first(where: { $0.name == "redirect_uri" })?.value, "\(url)")
    }

    private static func port(of url: String) throws -> UInt16 {
        try #require(URLComponents(string: url)?.port.map(UInt16.init), "\(url)")
    }

    @Test("a provider matching redirect URIs exactly: any port fails on its page, the registered port signs in")
    func exactProviderSignsInThroughTheFixedPort() async throws {
        let port: UInt16 = 29170
        let env = try BrokerEnvironment(
            idpArguments: ["--exact-redirect-uris"], usersFile: Self.usersFile(registering: port))

        // Without the setting: a port the system picked, which the provider refuses, saying why.
        let refused = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let start = try await env.browser.nextURL()
        let provider = try await env.browser.providerURL(behind: start)
        let outcome = try await env.browser.visit(provider).outcome
        guard case .page(400, let text) = outcome else {
            Issue.record("the provider answered \(outcome)")
            return
        }
        #expect(text.contains("does not match") && text.contains("http://127.0.0.1:\(port)/"), "\(text)")
        #expect(try Self.port(of: start) != port)
        refused.kill()

        // With it: the redirect URI is the registered one, and the person signs in.
        try env.restartBroker(extraArguments: ["--config", try Self.configuration("\(port)", in: env.directory)])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let fixedStart = try await env.browser.nextURL()
        #expect(try Self.port(of: fixedStart) == port, "\(fixedStart)")
        let signedIn = try await env.browser.signIn(
            at: fixedStart, username: TestUsers.alice.username, password: TestUsers.alice.password)
        guard case .page(200, _) = signedIn else {
            Issue.record("the browser ended on \(signedIn)")
            return
        }
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
        #expect(ctl.stdoutText.contains(TestUsers.alice.username), "\(ctl.allOutput)")

        // The port is free again at once (the answered connection lingers in TIME_WAIT), and the
        // redirect URI sent is exactly the registered one.
        _ = try env.brokerctl(["sign-out", "--client-id", "mail-app"])
        _ = try await env.browser.nextURL()  // the end-session page
        let again = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        defer { again.kill() }
        let nextStart = try await env.browser.nextURL()
        #expect(try await Self.redirectURI(behind: nextStart, env) == "http://127.0.0.1:\(port)/")
    }

    @Test("a value brokerd cannot use stops the start with status 1, naming the file, key, value and what it takes")
    func aBadValueStopsTheStart() throws {
        let directory = try TemporaryDirectory()
        for (index, value) in [#""53100-53300""#, "80", #""53109-53100""#, #""53100,53101""#].enumerated() {
            let config = try Self.configuration(value, in: directory)
            let state = directory.path + "/state-\(index)"
            let brokerd = try ChildProcess(
                "brokerd", executable: Binaries.path("brokerd"),
                arguments: [
                    "--address", "unix:path=\(directory.path)/no-bus", "--authority", "http://127.0.0.1:9",
                    "--state-dir", state, "--config", config,
                ])
            #expect(try brokerd.waitForExit(timeout: .seconds(10)) == 1, "\(value)")
            let error = brokerd.stderrText
            #expect(
                error.contains(
                    "brokerd: the configuration file \(config): loopbackRedirectPorts is \(value); it takes a port "
                        + "of 127.0.0.1 from 1024 to 65535, or a range of at most 100 of them, lowest first, e.g. "
                        + #"53100 or "53100-53109""#), "\(error)")
            #expect(!FileManager.default.fileExists(atPath: state), "brokerd wrote its state for \(value)")
        }
    }

    @Test("the only port held by another program: BrowserUnavailable at once, naming it and the key")
    func aPortTakenByAnotherProgram() async throws {
        let port: UInt16 = 29175
        let holder = try ChildProcess(
            "port-holder", executable: "/usr/bin/python3",
            arguments: [
                "-c",
                "import socket, sys\n"
                    + "s = socket.socket()\n"
                    + "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                    + "s.bind(('127.0.0.1', \(port)))\n"
                    + "s.listen()\n"
                    + "print('listening', flush=True)\n"
                    + "sys.stdin.read()\n",
            ], keepStdinOpen: true)
        defer { holder.closeStdin() }
        _ = try await offThePool { try holder.waitForLine(timeout: .seconds(20)) { $0 == "listening" } }

        let directory = try TemporaryDirectory()
        defer { withExtendedLifetime(directory) {} }
        let config = try Self.configuration(#""\#(port)""#, in: directory)
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 1, "\(ctl.allOutput)")
        let error = ctl.stderrText
        #expect(error.contains("io.shareddevice.Broker1.Error.BrowserUnavailable"), "\(error)")
        #expect(error.contains("loopbackRedirectPorts") && error.contains("port \(port)"), "\(error)")
        #expect(error.contains("taken"), "\(error)")
        // No page was opened, so nothing went to the provider or to whoever holds the port.
        #expect(env.browser.openedCount == 0)
        #expect(try await env.idpStats()["authorize"] as? Int ?? 0 == 0)
    }

    @Test("two sign-ins share a range of two ports; a third is refused, and a finished one's port is reused")
    func concurrentSignInsShareTheRange() async throws {
        let directory = try TemporaryDirectory()
        defer { withExtendedLifetime(directory) {} }
        let config = try Self.configuration(#""29180-29181""#, in: directory)
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        let first = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        defer { first.kill() }
        let firstStart = try await env.browser.nextURL()
        let second = try env.startBrokerctl(["sign-in", "--client-id", "calendar-app", "--interactive"])
        defer { second.kill() }
        let secondStart = try await env.browser.nextURL()
        // The lowest free port first: the first sign-in's is 29180.
        #expect(try Self.port(of: firstStart) == 29180, "\(firstStart)")
        #expect(try Self.port(of: secondStart) == 29181, "\(secondStart)")

        let third = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        #expect(try await offThePool { try third.waitForExit(timeout: .seconds(20)) } == 1, "\(third.allOutput)")
        #expect(third.stderrText.contains("io.shareddevice.Broker1.Error.BrowserUnavailable"), "\(third.allOutput)")
        #expect(third.stderrText.contains("ports 29180-29181"), "\(third.allOutput)")
        #expect(second.isRunning && first.isRunning)

        // The first sign-in ends (its answered connections linger in TIME_WAIT on 29180), the device
        // is signed out again, and the next sign-in listens on 29180 at once.
        let signedIn = try await env.browser.signIn(
            at: firstStart, username: TestUsers.alice.username, password: TestUsers.alice.password)
        guard case .page(200, _) = signedIn else {
            Issue.record("the browser ended on \(signedIn)")
            return
        }
        #expect(try await offThePool { try first.waitForExit(timeout: .seconds(20)) } == 0, "\(first.allOutput)")
        second.kill()
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        _ = try await env.browser.nextURL()  // the end-session page
        let fourth = try env.startBrokerctl(["sign-in", "--client-id", "notes-app", "--interactive"])
        defer { fourth.kill() }
        #expect(try Self.port(of: try await env.browser.nextURL()) == 29180)
    }
}
