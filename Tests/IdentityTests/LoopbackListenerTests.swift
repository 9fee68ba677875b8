import Foundation
import TestSupport
import Testing

@testable import Identity

/// The loopback listener's start addresses and the quoting of a browser command's output, without
/// brokerd (the attacks on the listener by another uid and by a flood are in IntegrationTests).
@Suite("Loopback listener and browser command output")
struct LoopbackListenerTests {
    /// `GET target` on 127.0.0.1:`port`: the answer's head, or "" when the connection is refused or
    /// closed unanswered.
    private static func get(_ port: UInt16, _ target: String) -> String { LoopbackHTTP.head(port, target) }

    @Test("a start address redirects once; a listener of start addresses alone then ends")
    func startAddressIsServedOnce() async throws {
        let listener = try LoopbackRedirectListener(expectedState: nil, lifetime: .seconds(30))
        let target = "https://idp.example/logout?client_id=x&id_token_hint=eyJ.e30.c2ln"
        let start = listener.startAddress(redirectingTo: target)
        #expect(start.hasPrefix("http://127.0.0.1:\(listener.port)/start/") && !start.contains("?"), "\(start)")
        let path = String(start.dropFirst("http://127.0.0.1:\(listener.port)".count))

        #expect(Self.get(listener.port, "/start/another").hasPrefix("HTTP/1.1 404"))
        let first = Self.get(listener.port, path)
        #expect(first.hasPrefix("HTTP/1.1 303"), "\(first)")
        #expect(first.contains("\r\nLocation: \(target)\r\n"), "\(first)")
        // Served: the listener has nothing more to serve and stops; the waiter hears so.
        #expect(await listener.waitForRedirect() == nil)
        #expect(!Self.get(listener.port, path).hasPrefix("HTTP/1.1 303"))
    }

    @Test("a start address of a sign-in listener is served once; the redirect with its state ends the wait")
    func signInListener() async throws {
        let listener = try LoopbackRedirectListener(expectedState: "the-state", lifetime: .seconds(30))
        defer { listener.shutDown() }
        let start = listener.startAddress(redirectingTo: "https://idp.example/authorize?state=the-state")
        let path = String(start.dropFirst("http://127.0.0.1:\(listener.port)".count))
        #expect(Self.get(listener.port, path).hasPrefix("HTTP/1.1 303"))
        #expect(Self.get(listener.port, path).hasPrefix("HTTP/1.1 404"))
        #expect(Self.get(listener.port, "/?code=c&state=other").hasPrefix("HTTP/1.1 400"))
        #expect(Self.get(listener.port, "/?code=c&state=the-state").hasPrefix("HTTP/1.1 200"))
        #expect(await listener.waitForRedirect() == ["code": "c", "state": "the-state"])
    }

    @Test("fixed ports: the first free one of the range, none twice, every one taken said by name")
    func fixedPorts() async throws {
        let ports: ClosedRange<UInt16> = 29190...29191
        let first = try LoopbackRedirectListener(expectedState: "a", lifetime: .seconds(30), ports: ports)
        defer { first.shutDown() }
        let second = try LoopbackRedirectListener(expectedState: "b", lifetime: .seconds(30), ports: ports)
        defer { second.shutDown() }
        #expect(first.port == 29190 && second.port == 29191)
        #expect(first.redirectURI == "http://127.0.0.1:29190/")
        #expect(throws: IdentityError.self) {
            _ = try LoopbackRedirectListener(expectedState: "c", lifetime: .seconds(30), ports: ports)
        }
        do {
            _ = try LoopbackRedirectListener(expectedState: "c", lifetime: .seconds(30), ports: 29191...29191)
            Issue.record("a second listener on a port in use")
        } catch .redirectPortsTaken(let why) {
            #expect(why.contains("loopbackRedirectPorts") && why.contains("port 29191"), "\(why)")
        } catch {
            Issue.record("\(error)")
        }
        // The flows still answer on their own ports.
        #expect(Self.get(second.port, "/?code=c&state=b").hasPrefix("HTTP/1.1 200"))
        #expect(await second.waitForRedirect() == ["code": "c", "state": "b"])
    }

    @Test("a browser command's output is quoted on one line, escaped, without URL queries")
    func quotedOutput() {
        let output =
            "xdg-open: no method available for opening 'https://idp.example/logout?client_id=x&id_token_hint="
            + "eyJhbGciOiJub25lIn0.e30.c2ln'\n\u{1B}[31mgio: http://127.0.0.1:4/start/abc failed\u{1B}[0m\n"
        let quoted = BrowserCommand.quoted(output)
        #expect(!quoted.contains("id_token_hint") && !quoted.contains("c2ln") && !quoted.contains("client_id"))
        #expect(quoted.contains("https://idp.example/logout?…'"), "\(quoted)")
        #expect(quoted.contains("http://127.0.0.1:4/start/abc failed"), "\(quoted)")
        #expect(!quoted.contains("\u{1B}") && !quoted.contains("\n"), "\(quoted)")
        #expect(BrowserCommand.quoted(String(repeating: "a", count: 5000)).count == 400)
    }
}
