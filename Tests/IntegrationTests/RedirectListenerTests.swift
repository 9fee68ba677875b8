import Foundation
import TestSupport
import Testing

/// The loopback redirect listener (RFC 8252) from the attacker's side: any program on the
/// machine can find its port (`/proc/net/tcp`) and connect, and any user can read the browser's
/// command line (`/proc/PID/cmdline`). Another user must neither learn the provider's URL, nor
/// finish the sign-in with a code of their own, nor stall it; a request with another `state`, a
/// stray path and a crowd of idle connections of brokerd's own user must not hold it back either.
@Suite("The loopback redirect under attack", .serialized)
struct RedirectListenerTests {
    static let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"]

    /// Connects to 127.0.0.1:`port`; the descriptor, or a failure.
    private static func connect(_ port: UInt16) throws -> Int32 {
        guard let fd = LoopbackHTTP.connect(port) else { throw ProcessFailure("connect to port \(port): \(errno)") }
        return fd
    }

    /// Sends `GET target` and returns the status line of the answer.
    private static func get(_ port: UInt16, _ target: String) throws -> String {
        LoopbackHTTP.head(port, target).split(separator: "\r\n").first.map(String.init) ?? ""
    }

    /// The HTTP status user 65534 gets for `url` (curl through setpriv), "000" for none.
    private static func statusAsNobody(_ url: String) async throws -> String {
        let run = try await runCommand(
            "/usr/bin/setpriv",
            nobody + ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", url])
        return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func port(of url: String) throws -> UInt16 {
        try #require(URLComponents(string: url)?.port.map(UInt16.init))
    }

    @Test("a forged redirect, a stray path and 50 idle connections: the real redirect still signs in")
    func forgedAndIdleConnections() async throws {
        let env = try BrokerEnvironment()
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let start = try await env.browser.nextURL()
        let port = try Self.port(of: start)

        // Before the person has finished: what a local program of the same user can send.
        let forged = try await offThePool { try Self.get(port, "/?code=stolen&state=guessed") }
        #expect(forged.contains("400"), "\(forged)")
        let error = try await offThePool { try Self.get(port, "/?error=access_denied&state=guessed") }
        #expect(error.contains("400"), "\(error)")
        #expect(try await offThePool { try Self.get(port, "/favicon.ico") }.contains("404"))
        #expect(try await offThePool { try Self.get(port, "/start/guessed") }.contains("404"))
        let idle = try (0..<50).map { _ in try Self.connect(port) }
        defer { for fd in idle { close(fd) } }

        // The person signs in while every idle connection is still open.
        let outcome = try await env.browser.signIn(
            at: start, username: TestUsers.alice.username, password: TestUsers.alice.password)
        guard case .page(200, _) = outcome else {
            Issue.record("the browser ended on \(outcome)")
            return
        }
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
        #expect(ctl.stdoutText.contains(TestUsers.alice.username), "\(ctl.allOutput)")
    }

    @Test("another user can neither follow the start address nor deliver the redirect; brokerd's own user can")
    func anotherUserIsRefused() async throws {
        let env = try BrokerEnvironment()
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let start = try await env.browser.nextURL()

        // Another user who read the browser's command line: the start address gives nothing away.
        let followed = try await Self.statusAsNobody(start)
        #expect(followed == "403", "user 65534 was answered \(followed) at \(start)")
        // The start address is still the person's: the browser follows it once.
        let url = try await env.browser.providerURL(behind: start)
        #expect(try await Self.statusAsNobody(start) != "303")
        let redirect = try await env.browser.redirectAfterSigningIn(
            at: url, username: TestUsers.alice.username, password: TestUsers.alice.password)

        // The redirect with the flow's state and a valid code, sent by another user (as mallory's
        // code would be): refused, and the flow goes on.
        let hijacked = try await Self.statusAsNobody(redirect)
        #expect(hijacked == "403", "user 65534 was answered \(hijacked)")
        #expect(ctl.isRunning, "the sign-in ended on another user's redirect: \(ctl.allOutput)")

        // The same request from brokerd's own user finishes it.
        let port = try Self.port(of: redirect)
        let target = String(redirect.dropFirst("http://127.0.0.1:\(port)".count))
        let served = try await offThePool { try Self.get(port, target) }
        #expect(served.contains("200"), "\(served)")
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
        #expect(ctl.stdoutText.contains(TestUsers.alice.username), "\(ctl.allOutput)")
    }

    @Test("400 idle connections of another user and 400 of brokerd's own: the redirect is served within 3 s")
    func floodOfIdleConnections() async throws {
        let env = try BrokerEnvironment()
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let start = try await env.browser.nextURL()
        let port = try Self.port(of: start)
        let url = try await env.browser.providerURL(behind: start)
        let redirect = try await env.browser.redirectAfterSigningIn(
            at: url, username: TestUsers.alice.username, password: TestUsers.alice.password)

        // User 65534 opens 400 connections and holds them until its standard input closes.
        let holder = try ChildProcess(
            "idle-holder", executable: "/usr/bin/setpriv",
            arguments: Self.nobody + [
                "/bin/bash", "-c",
                "for i in $(seq 400); do exec {fd}<>/dev/tcp/127.0.0.1/\(port) || exit 1; done; echo holding; read x",
            ], keepStdinOpen: true)
        defer { holder.closeStdin() }
        _ = try await offThePool { try holder.waitForLine(timeout: .seconds(30)) { $0 == "holding" } }
        let idle = try await offThePool { try (0..<400).map { _ in try Self.connect(port) } }
        defer { for fd in idle { close(fd) } }

        let began = ContinuousClock.now
        let target = String(redirect.dropFirst("http://127.0.0.1:\(port)".count))
        let served = try await offThePool { try Self.get(port, target) }
        let took = ContinuousClock.now - began
        #expect(served.contains("200"), "\(served)")
        #expect(took < .seconds(3), "the browser's redirect was served after \(took)")
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
    }
}
