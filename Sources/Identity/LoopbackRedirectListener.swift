import Glibc
import Locking

/// The loopback redirect of RFC 8252 (7.3): a one-shot HTTP listener on 127.0.0.1 with a port
/// the system picks per flow. It waits for the browser's `GET /?code=...&state=...`, answers
/// with a short page, and hands the query parameters over. Other requests (a favicon) get 404.
final class LoopbackRedirectListener: Sendable {
    /// The port the system chose.
    let port: UInt16
    private let socket: Int32
    private let closed = Locked(false)

    init() throws(IdentityError) {
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
        guard bound == 0, named == 0, listen(fd, 8) == 0 else {
            close(fd)
            throw IdentityError.badResponse("cannot listen on a loopback port for the redirect")
        }
        socket = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { shutDown() }

    /// `http://127.0.0.1:PORT/`.
    var redirectURI: String { "http://127.0.0.1:\(port)/" }

    /// Waits for the redirect and returns its query parameters; nil when the listener was shut
    /// down (timeout or cancellation) first.
    func waitForRedirect() async -> [String: String]? {
        await withCheckedContinuation { continuation in
            Thread.detach { [self] in continuation.resume(returning: acceptRedirect()) }
        }
    }

    /// Stops waiting; `waitForRedirect` returns nil.
    func shutDown() {
        let first = closed.withLock { wasClosed in
            defer { wasClosed = true }
            return !wasClosed
        }
        if first {
            Glibc.shutdown(socket, Int32(SHUT_RDWR))
            close(socket)
        }
    }

    private func acceptRedirect() -> [String: String]? {
        while true {
            let client = accept(socket, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return nil
            }
            defer { close(client) }
            // A browser sends the request at once; do not let a stray connection hold the flow.
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard let target = Self.readRequestTarget(client) else { continue }
            let (path, query) = Self.split(target)
            guard path == "/", let parameters = query.map(FormDecoding.decode), parameters["state"] != nil else {
                Self.respond(client, status: "404 Not Found", body: "Not found.")
                continue
            }
            let failed = parameters["error"] != nil
            Self.respond(
                client, status: "200 OK",
                body: failed
                    ? "Sign-in did not complete. You can close this window and return to the app."
                    : "You are signed in. You can close this window and return to the app.")
            return parameters
        }
    }

    /// The request target of `GET <target> HTTP/1.1`, reading at most 16 KiB of headers.
    private static func readRequestTarget(_ fd: Int32) -> String? {
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while request.count < 16384 {
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
