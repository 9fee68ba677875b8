import Foundation
import TestSupport
import Testing

/// What the browser's command line and output tell others: every user of the machine reads a
/// process's command line (`/proc/PID/cmdline`), and brokerd's standard error is the journal.
@Suite("The browser's command line and output")
struct BrowserCommandLineTests {
    @Test("the browser is given a one-time local address: no state, code challenge or ID token on its command line")
    func nothingSecretOnTheCommandLine() async throws {
        let env = try BrokerEnvironment()
        let alice = TestUsers.alice
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        try await env.browser.signIn(
            at: try await env.browser.nextURL(), username: alice.username, password: alice.password)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
        // Shared mode ends the browser session on every sign-out, with the ID token as id_token_hint.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app", "--from-browser"]).status == 0)
        let logout = try await env.browser.nextProviderURL()
        #expect(logout.contains("id_token_hint="), "the end-session page is reached with its hint: \(logout)")

        let lines = env.browser.commandLines
        #expect(lines.count == 2, "\(lines)")
        for line in lines {
            for secret in ["state=", "code_challenge", "id_token_hint", "nonce="] {
                #expect(!line.contains(secret), "the browser's command line holds \(secret): \(line)")
            }
            #expect(line.hasPrefix("http://127.0.0.1:") && line.contains("/start/"), "\(line)")
        }
    }

    @Test("a browser command that fails: its output reaches the log escaped, with no URL query and no token")
    func failingBrowserOutput() async throws {
        let directory = try TemporaryDirectory()
        // xdg-open without a browser: it repeats the URL it was given, as the real one does.
        let browser = try directory.write(
            "xdg-open",
            """
            #!/bin/sh
            printf 'xdg-open: no method available for opening %s\\n' "$1" >&2
            printf '\\033[31mgio: https://idp.example/logout?client_id=x&id_token_hint=eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.c2lnbmF0dXJl\\033[0m\\n' >&2
            exit 3
            """)
        chmod(browser, 0o700)
        let env = try BrokerEnvironment(brokerEnvironment: ["BROWSER": browser])
        let signedIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        let idToken = try #require(try signedIn.json()["idToken"] as? String)
        let signOut = try env.brokerctl(["sign-out", "--client-id", "mail-app", "--from-browser"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        #expect(signOut.stderr.contains("browser session may still be open"), "\(signOut.stderr)")
        // The person is told what to do, not how the desktop failed: that is for brokerd's log.
        #expect(signOut.stderr.contains("close any browser window"), "\(signOut.stderr)")
        for detail in ["xdg-open", "exit status", "org.freedesktop.portal", "OpenURI"] {
            #expect(!signOut.stderr.contains(detail), "\(detail): \(signOut.stderr)")
        }
        _ = try env.brokerd.stop()

        let log = env.brokerd.process.allOutput
        #expect(log.contains("failed (exit status 3)"), "the failure is logged: \(log)")
        #expect(!log.contains("id_token_hint="), "a token's parameter reached the log")
        #expect(!log.contains(String(idToken.split(separator: ".").last ?? "")), "the ID token reached the log")
        #expect(!log.contains("c2lnbmF0dXJl"), "the command's token-like output reached the log")
        #expect(!log.contains("\u{1B}"), "the command's escape sequence reached the log unescaped")
        #expect(!(signOut.stderr + signOut.stdout).contains("id_token_hint="))
    }
}
