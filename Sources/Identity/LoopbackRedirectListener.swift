import Glibc
import Locking

/// The loopback redirect of RFC 8252 (7.3): an HTTP listener on 127.0.0.1 with a port the system
/// picks per flow. It serves from the moment it exists (the browser may come back before the
/// desktop has said that it opened the page), answers every request with a short page, and hands
/// over the query parameters of the one redirect that carries this flow's `state`.
///
/// Any program on the machine can find the port and connect. So connections are served
/// concurrently, each for at most ``connectionDeadlineSeconds``: idle ones cannot hold the
/// browser's redirect back. Past ``maximumConnections`` at once, new ones wait in the kernel's
/// queue, in order, for a slot (never refused: the browser's may be among them). A request with
/// another `state` is answered and ignored: it cannot end the flow.
final class LoopbackRedirectListener: Sendable {
    static let maximumConnections = 64
    static let connectionDeadlineSeconds = 5

    /// The port the system chose.
    let port: UInt16
    private let expectedState: String
    private let shared: Shared

    /// What the accepting thread, the connections' threads and the waiter share.
    /// `@unchecked`: its semaphore is thread-safe by POSIX; the rest is behind `state`'s lock.
    private final class Shared: @unchecked Sendable {
        struct State {
            var closed = false
            var redirect: [String: String]?
            var waiter: CheckedContinuation<[String: String]?, Never>?
        }
        let socket: Int32
        let state = Locked(State())
        /// Free connection slots; the accepting thread takes one before each accept.
        private let slots: UnsafeMutablePointer<sem_t>

        init(socket: Int32) {
            self.socket = socket
            slots = .allocate(capacity: 1)
            sem_init(slots, 0, UInt32(LoopbackRedirectListener.maximumConnections))
        }

        deinit {
            sem_destroy(slots)
            slots.deallocate()
        }

        func takeSlot() { while sem_wait(slots) != 0 && errno == EINTR {} }
        func releaseSlot() { sem_post(slots) }

        /// Ends the wait with `redirect` (nil: shut down) and stops accepting; the first call wins.
        func finish(with redirect: [String: String]?) {
            let waiter = state.withLock { state -> CheckedContinuation<[String: String]?, Never>? in
                guard !state.closed else { return nil }
                state.closed = true
                state.redirect = redirect
                defer { state.waiter = nil }
                return state.waiter
            }
            // Wakes accept(); the accepting thread closes the socket, so its number is not reused under it.
            Glibc.shutdown(socket, Int32(SHUT_RDWR))
            waiter?.resume(returning: redirect)
        }
    }

    init(expectedState: String) throws(IdentityError) {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw IdentityError.badResponse("cannot open a loopback socket for the redirect") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0, named == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw IdentityError.badResponse("cannot listen on a loopback port for the redirect")
        }
        port = UInt16(bigEndian: address.sin_port)
        self.expectedState = expectedState
        let shared = Shared(socket: fd)
        self.shared = shared
        Thread.detach { Self.accept(shared, expectedState: expectedState) }
    }

    deinit { shutDown() }

    /// `http://127.0.0.1:PORT/`.
    var redirectURI: String { "http://127.0.0.1:\(port)/" }

    /// Waits for the redirect with this flow's `state` and returns its query parameters; nil when
    /// the listener was shut down (timeout or cancellation) first.
    func waitForRedirect() async -> [String: String]? {
        await withCheckedContinuation { continuation in
            let done = shared.state.withLock { state -> (Bool, [String: String]?) in
                guard !state.closed else { return (true, state.redirect) }
                state.waiter = continuation
                return (false, nil)
            }
            if done.0 { continuation.resume(returning: done.1) }
        }
    }

    /// Stops waiting; `waitForRedirect` returns nil.
    func shutDown() { shared.finish(with: nil) }

    private static func accept(_ shared: Shared, expectedState: String) {
        defer { close(shared.socket) }
        while true {
            shared.takeSlot()
            // brokerd starts programs with every inherited descriptor closed, so no CLOEXEC is needed.
            let client = Glibc.accept(shared.socket, nil, nil)
            if client < 0 {
                shared.releaseSlot()
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            Thread.detach {
                defer {
                    close(client)
                    shared.releaseSlot()
                }
                serve(client, shared: shared, expectedState: expectedState)
            }
        }
    }

    private static func serve(_ client: Int32, shared: Shared, expectedState: String) {
        // A browser sends its request at once; a connection that does not is dropped.
        var timeout = timeval(tv_sec: connectionDeadlineSeconds, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let target = readRequestTarget(client, deadline: monotonicSeconds() + connectionDeadlineSeconds) else {
            return
        }
        let (path, query) = split(target)
        guard path == "/", let parameters = query.map(FormDecoding.decode), let state = parameters["state"] else {
            respond(client, status: "404 Not Found", body: "Not found.")
            return
        }
        guard constantTimeEqual(state, expectedState) else {
            respond(
                client, status: "400 Bad Request",
                body: "This address does not belong to the sign-in in progress. Return to the app.")
            return
        }
        let failed = parameters["error"] != nil
        respond(
            client, status: "200 OK",
            body: failed
                ? "Sign-in did not complete. You can close this window and return to the app."
                : "Return to the app to finish signing in. You can close this window.")
        shared.finish(with: parameters)
    }

    private static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    private static func monotonicSeconds() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now.tv_sec
    }

    /// The request target of `GET <target> HTTP/1.1`, reading at most 16 KiB of headers.
    private static func readRequestTarget(_ fd: Int32, deadline: Int) -> String? {
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while request.count < 16384, monotonicSeconds() < deadline {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return nil }
            request += buffer[0..<n]
            if request.firstIndex(of: UInt8(ascii: "\n")) != nil { break }
        }
        guard let end = request.firstIndex(of: UInt8(ascii: "\r")) ?? request.firstIndex(of: UInt8(ascii: "\n")) else {
            return nil
        }
        let line = String(decoding: request[..<end], as: UTF8.self).split(separator: " ")
        guard line.count == 3, line[0] == "GET" else { return nil }
        return String(line[1])
    }

    private static func split(_ target: String) -> (path: String, query: String?) {
        guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
        return (String(target[..<mark]), String(target[target.index(after: mark)...]))
    }

    private static func respond(_ fd: Int32, status: String, body: String) {
        let html =
            "<!doctype html><html><head><meta "
            + "charset=\"utf-8\"><title>Sign-in</title></head><body><p>\(body)</p></body></html>"
        let response =
            "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: "
            + "\(html.utf8.count)\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n\(html)"
        let bytes = Array(response.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}

/// `application/x-www-form-urlencoded` and query strings.
enum FormDecoding {
    static func decode(_ query: String) -> [String: String] {
        var result: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let key = parts.first.map({ percentDecode(String($0)) }), !key.isEmpty else { continue }
            result[key] = parts.count > 1 ? percentDecode(String(parts[1])) : ""
        }
        return result
    }

    static func percentDecode(_ text: String) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
                continue
            }
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                continue
            }
            bytes.append(byte)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
