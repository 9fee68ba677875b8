import Foundation
import TestSupport
import Testing

/// The loopback redirect listener (RFC 8252) from the attacker's side: any program on the
/// machine can find its port (`/proc/net/tcp`) and connect. A request with another `state`, a
/// stray path and a crowd of idle connections must neither end the sign-in nor hold back the
/// browser's real redirect.
@Suite("The loopback redirect under attack", .serialized)
struct RedirectListenerTests {
    /// Connects to 127.0.0.1:`port`; the descriptor, or a failure.
    private static func connect(_ port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ProcessFailure("socket: \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw ProcessFailure("connect to port \(port): \(errno)")
        }
        return fd
    }

    /// Sends `GET target` and returns the status line of the answer.
    private static func get(_ port: UInt16, _ target: String) throws -> String {
        let fd = try connect(port)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            answer += buffer[0..<n]
        }
        return String(decoding: answer, as: UTF8.self).split(separator: "\r\n").first.map(String.init) ?? ""
    }

    @Test("a forged redirect, a stray path and 50 idle connections: the real redirect still signs in")
    func forgedAndIdleConnections() async throws {
        let env = try BrokerEnvironment()
        let ctl = try env.startBrokerctl(["sign-in", "--client-id", "mail-app", "--interactive"])
        let url = try await env.browser.nextURL()
        let redirect = try #require(
            URLComponents(string: url)?.queryItems?.first { $0.name == "redirect_uri" }?.value)
        let port = try #require(URLComponents(string: redirect)?.port.map(UInt16.init))

        // Before the person has finished: what a local attacker can send.
        let forged = try await offThePool { try Self.get(port, "/?code=stolen&state=guessed") }
        #expect(forged.contains("400"), "\(forged)")
        let error = try await offThePool { try Self.get(port, "/?error=access_denied&state=guessed") }
        #expect(error.contains("400"), "\(error)")
        #expect(try await offThePool { try Self.get(port, "/favicon.ico") }.contains("404"))
        let idle = try (0..<50).map { _ in try Self.connect(port) }
        defer { for fd in idle { close(fd) } }

        // The person signs in while every idle connection is still open.
        let outcome = try await env.browser.signIn(
            at: url, username: TestUsers.alice.username,
            password: TestUsers.alice.password)
        guard case .page(200, _) = outcome else {
            Issue.record("the browser ended on \(outcome)")
            return
        }
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.allOutput)")
        #expect(ctl.stdoutText.contains(TestUsers.alice.username), "\(ctl.allOutput)")
    }
}
