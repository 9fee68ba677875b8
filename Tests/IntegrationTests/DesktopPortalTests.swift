import BrokerAPI
import DBus
import Foundation
import SharedDeviceClient
import TestSupport
import Testing

/// Opening the browser the desktop's way: brokerd hands sign-in and end-session pages to the
/// desktop portal (`org.freedesktop.portal.OpenURI`) when one is on the bus, to `$BROWSER` or
/// `xdg-open` when none is or it fails, through `systemd-run --user` under systemd, and says
/// `BrowserUnavailable` (with the page's address) when nothing works. Over a private bus with the
/// real brokerd and idp-sim.
///
/// The real portal opening pages in a real Chromium is tested in `Tests/Browser` (make
/// test-browser). Here a portal the test owns stands in only for the answers a real one cannot be
/// made to give in a test: the person declining its dialog, a failing backend, no answer at all.
@Suite("Opening the browser through the desktop portal", .serialized)
struct DesktopPortalTests {
    private func application(_ env: BrokerEnvironment) throws -> PublicClientApplication {
        try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
    }

    private func signInInteractively(_ app: PublicClientApplication) -> Task<TokenResult, any Error> {
        Task {
            try await app.acquireToken(
                InteractiveTokenParameters(
                    scopes: ["User.Read"], promptType: .login, loginHint: TestUsers.alice.username))
        }
    }

    @Test("a portal that never answers does not hold back a sign-in whose browser came back")
    func portalThatNeverAnswers() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let portal = try await FakePortal(bus: env.bus, response: nil)
        let signIn = signInInteractively(try application(env))
        let page = try await portal.nextURL()
        _ = try await env.browser.signIn(
            at: page, username: TestUsers.alice.username, password: TestUsers.alice.password)
        #expect(try await signIn.value.account.username == TestUsers.alice.username)
        #expect(env.browser.openedCount == 0)
    }

    @Test("a portal that fails to open the page hands it to $BROWSER")
    func portalFailureFallsBack() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let portal = try await FakePortal(bus: env.bus, response: 2)
        let signIn = signInInteractively(try application(env))

        let page = try await env.browser.nextURL()
        #expect(portal.openedCount == 1)
        #expect(try await portal.nextURL() == page)
        _ = try await env.browser.signIn(
            at: page, username: TestUsers.alice.username, password: TestUsers.alice.password)
        #expect(try await signIn.value.account.username == TestUsers.alice.username)
    }

    @Test("the person declining in the portal's dialog cancels the sign-in; no browser is started")
    func declinedInThePortal() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let portal = try await FakePortal(bus: env.bus, response: 1)
        let signIn = signInInteractively(try application(env))
        _ = try await portal.nextURL()
        await #expect {
            _ = try await signIn.value
        } throws: { error in
            guard case BrokerError.cancelled = error else { return false }
            return true
        }
        #expect(env.browser.openedCount == 0)
    }

    @Test("neither portal nor browser: the app is told the page, which can be opened by hand")
    func noBrowserOpenedByHand() async throws {
        let env = try await offThePool {
            try BrokerEnvironment(brokerEnvironment: ["BROWSER": "", "PATH": "/nonexistent"])
        }
        let (stages, stage) = AsyncStream.makeStream(of: SignInProgress.self)
        let app = try application(env)
        let signIn = Task {
            try await app.acquireToken(
                InteractiveTokenParameters(
                    scopes: ["User.Read"], loginHint: TestUsers.alice.username,
                    progress: { stage.yield($0) }))
        }
        let told = try await Self.first(in: stages) { $0.stage == .browserUnavailable }
        let reason = try #require(told.reason)
        #expect(reason.contains("desktop portal") && reason.contains("xdg-open"), "\(reason)")
        let page = try #require(told.url)
        _ = try await env.browser.signIn(
            at: page, username: TestUsers.alice.username, password: TestUsers.alice.password)
        #expect(try await signIn.value.account.username == TestUsers.alice.username)
        #expect(env.browser.openedCount == 0)
    }

    @Test("neither portal nor browser, and nobody opens the page: BrowserUnavailable naming it")
    func noBrowserAtAll() async throws {
        let env = try await offThePool {
            try BrokerEnvironment(
                // Long enough for the portal and xdg-open to be found missing on two busy cores:
                // before that, the time-out would say Cancelled instead.
                brokerArguments: ["--interactive-timeout", "4"],
                brokerEnvironment: ["BROWSER": "", "PATH": "/nonexistent"])
        }
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 1)
        let output = ctl.stderrText
        #expect(output.contains("Open this page in a browser on this device"), "\(ctl.allOutput)")
        #expect(output.contains("io.shareddevice.Broker1.Error.BrowserUnavailable"), "\(ctl.allOutput)")
        // The page named is the one-time local start address, never the provider's URL with its state.
        #expect(output.contains("http://127.0.0.1:") && output.contains("/start/"), "the page: \(ctl.allOutput)")
        #expect(!output.contains("state="), "\(ctl.allOutput)")
        // Nothing changed: no account, and a sign-in by password still works.
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
    }

    @Test("under systemd without a portal, the browser is started through systemd-run --user, not as a child")
    func throughSystemdRun() async throws {
        let directory = try TemporaryDirectory()
        let calls = directory.path + "/systemd-run.calls"
        // systemd-run, where no user manager runs: records its arguments and runs the command.
        let fake = try directory.write(
            "systemd-run",
            """
            #!/bin/sh
            printf '%s\\n' "$*" >> '\(calls)'
            while [ "$1" != "--" ]; do shift; done
            shift
            exec "$@"
            """)
        chmod(fake, 0o700)
        let env = try await offThePool {
            try BrokerEnvironment(
                brokerEnvironment: [
                    "INVOCATION_ID": "0123456789abcdef0123456789abcdef",
                    "PATH": directory.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
                ])
        }
        let signIn = signInInteractively(try application(env))
        let page = try await env.browser.nextURL()
        _ = try await env.browser.signIn(
            at: page, username: TestUsers.alice.username, password: TestUsers.alice.password)
        #expect(try await signIn.value.account.username == TestUsers.alice.username)
        let recorded = try String(contentsOfFile: calls, encoding: .utf8)
        #expect(recorded.hasPrefix("--user --quiet --collect -- \(env.browser.command) \(page)"), "\(recorded)")
    }

    /// The first element of `stream` that matches, waiting at most 20 s for it.
    private static func first(
        in stream: AsyncStream<SignInProgress>, where matches: @escaping @Sendable (SignInProgress) -> Bool
    ) async throws -> SignInProgress {
        guard let found = await within(.seconds(20), { await stream.first(where: matches) }) else {
            throw ProcessFailure("no such sign-in progress within 20 s")
        }
        return found
    }
}
