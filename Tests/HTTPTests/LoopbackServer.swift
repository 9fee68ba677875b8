// A tiny real HTTP/1.1 server on 127.0.0.1 for the tests: one thread accepts, one thread per
// connection (bounded), one request per connection ("Connection: close"). It replies as the
// test's handler says: a scripted response (optionally delayed), a close-delimited stream of
// bytes, or a close without answering.

import Locking

@testable import HTTP

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A request as the server read it off the socket.
struct ReceivedRequest: Sendable {
    var method: String
    /// The request target: path and query, exactly as sent.
    var target: String
    var headers: [HTTPHeader]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        headers.first(where: { $0.name.lowercased() == name.lowercased() })?.value
    }

    var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// What the server does with a request.
enum Reply: Sendable {
    /// Answers with Content-Length after `delay` (cut short if the client goes away).
    case respond(status: Int, headers: [(String, String)] = [], body: [UInt8] = [], delay: Duration = .zero)
    /// Answers 200 without Content-Length and sends `total` bytes, then closes.
    case stream(total: Int)
    /// Closes the connection without a byte of answer.
    case close

    /// Echoes the request: method, target and content type in headers, the body as the body.
    static func echo(_ request: ReceivedRequest) -> Reply {
        .respond(
            status: 200,
            headers: [
                ("X-Echo-Method", request.method),
                ("X-Echo-Target", request.target),
                ("X-Echo-Content-Type", request.header("content-type") ?? ""),
            ], body: request.body)
    }
}

final class LoopbackServer: Sendable {
    struct Failure: Error { let what: String }

    let port: UInt16
    private let listener: Int32
    private let handler: @Sendable (ReceivedRequest) -> Reply
    private let state = Locked(State())

    private struct State: Sendable {
        var received: [ReceivedRequest] = []
        var connections = 0
        var clientsGoneDuringDelay = 0
        var stopped = false
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
    }

    /// What ``wait(within:until:)`` conditions look at.
    struct Observed: Sendable {
        var received: [ReceivedRequest]
        var clientsGoneDuringDelay: Int
    }

    private struct Waiter: Sendable {
        let condition: @Sendable (Observed) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }

    static let maxConnections = 128

    var base: String { "http://127.0.0.1:\(port)" }

    /// Requests received so far, in arrival order.
    var received: [ReceivedRequest] { state.withLock { $0.received } }

    /// How many delayed replies were abandoned because the client closed the connection.
    var clientsGoneDuringDelay: Int { state.withLock { $0.clientsGoneDuringDelay } }

    init(_ handler: @escaping @Sendable (ReceivedRequest) -> Reply = { .echo($0) }) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(what: "socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 128) == 0 else {
            close(fd)
            throw Failure(what: "bind/listen")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = UInt16(bigEndian: address.sin_port)
        self.listener = fd
        self.handler = handler
        spawn { [self] in acceptLoop() }
    }

    /// Suspends until `condition` holds for what the server has seen (true) or `limit` passes (false).
    /// Resumed from the server's own threads or a timer thread, never by polling with `Task.sleep`,
    /// so it also works for a task on ``DedicatedThreadExecutor`` while the global pool is stalled.
    func wait(within limit: Duration, until condition: @escaping @Sendable (Observed) -> Bool) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let id: UInt64? = state.withLock { state in
                if condition(Observed(received: state.received, clientsGoneDuringDelay: state.clientsGoneDuringDelay)) {
                    return nil
                }
                state.nextWaiter += 1
                state.waiters[state.nextWaiter] = Waiter(condition: condition, continuation: continuation)
                return state.nextWaiter
            }
            guard let id else {
                continuation.resume(returning: true)
                return
            }
            afterDelay(limit) { [state] in
                state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
            }
        }
    }

    /// Applies `change` to the state and resumes the waiters whose condition now holds.
    private func update(_ change: (inout State) -> Void) {
        let satisfied: [Waiter] = state.withLock { state in
            change(&state)
            let observed = Observed(received: state.received, clientsGoneDuringDelay: state.clientsGoneDuringDelay)
            let ready = state.waiters.filter { $0.value.condition(observed) }
            for id in ready.keys { state.waiters[id] = nil }
            return Array(ready.values)
        }
        for waiter in satisfied { waiter.continuation.resume(returning: true) }
    }

    /// Stops accepting; connections in progress finish on their own.
    func stop() {
        let first = state.withLock { state in
            defer { state.stopped = true }
            return !state.stopped
        }
        if first { shutdown(listener, Int32(SHUT_RDWR)) }
    }

    deinit { stop() }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                break
            }
            let admitted = state.withLock { state in
                guard !state.stopped, state.connections < Self.maxConnections else { return false }
                state.connections += 1
                return true
            }
            guard admitted else {
                close(connection)
                if state.withLock({ $0.stopped }) { break } else { continue }
            }
            spawn { [self] in
                serve(connection)
                close(connection)
                state.withLock { $0.connections -= 1 }
            }
        }
        close(listener)
    }

    private func serve(_ fd: Int32) {
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let request = readRequest(fd) else { return }
        update { $0.received.append(request) }
        switch handler(request) {
        case .close:
            return
        case .stream(let total):
            guard
                writeAll(
                    fd,
                    Array("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n".utf8)
                )
            else { return }
            let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 16 * 1024)
            var sent = 0
            while sent < total {
                let size = min(chunk.count, total - sent)
                guard writeAll(fd, Array(chunk[0..<size])) else { return }
                sent += size
            }
        case .respond(let status, let headers, let body, let delay):
            if delay > .zero, clientLeft(fd, within: delay) {
                update { $0.clientsGoneDuringDelay += 1 }
                return
            }
            var head = "HTTP/1.1 \(status) \(reason(status))\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
            _ = writeAll(fd, Array(head.utf8) + body)
        }
    }

    /// Waits up to `delay`; true if the client closed its end meanwhile.
    private func clientLeft(_ fd: Int32, within delay: Duration) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + delay
        while clock.now < deadline {
            let left = deadline - clock.now
            let (seconds, attoseconds) = left.components
            let ms = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, min(ms, 200))
            if ready > 0 {
                var byte: UInt8 = 0
                let n = recv(fd, &byte, 1, Int32(MSG_PEEK))
                if n <= 0 { return true }
            }
        }
        return false
    }

    private func readRequest(_ fd: Int32) -> ReceivedRequest? {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        var headEnd: Int?
        while headEnd == nil {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return nil }
            data += buffer[0..<n]
            if data.first == 0x16 {  // a TLS ClientHello: answer in plain text, as a real plain server would
                _ = writeAll(fd, Array("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n".utf8))
                return nil
            }
            headEnd = Self.find([13, 10, 13, 10], in: data)
            if data.count > 64 * 1024 { return nil }
        }
        guard let headEnd else { return nil }
        let head = String(decoding: data[0..<headEnd], as: UTF8.self)
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        guard !lines.isEmpty else { return nil }
        let requestLine = lines.removeFirst().split(separator: " ").map(String.init)
        guard requestLine.count == 3 else { return nil }
        var headers: [HTTPHeader] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].drop(while: { $0 == " " })
            headers.append(HTTPHeader(String(line[..<colon]), String(value)))
        }
        var body = Array(data[(headEnd + 4)...])
        let length = headers.first(where: { $0.name.lowercased() == "content-length" }).flatMap { Int($0.value) } ?? 0
        while body.count < length {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return nil }
            body += buffer[0..<n]
        }
        return ReceivedRequest(method: requestLine[0], target: requestLine[1], headers: headers, body: body)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count)
        where haystack[start..<(start + needle.count)].elementsEqual(needle) {
            return start
        }
        return nil
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes {
                send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    private func reason(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 404: return "Not Found"
        case 500: return "Internal Server Error"
        default: return "Status"
        }
    }
}

/// A port on 127.0.0.1 where nothing listens (bound, then closed).
func closedPort() -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    close(fd)
    return UInt16(bigEndian: address.sin_port)
}

/// Runs `body` on a new detached thread.
private func spawn(_ body: @escaping @Sendable () -> Void) {
    final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var thread = pthread_t()
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    let rc = pthread_create(
        &thread, nil,
        { raw in
            guard let raw else { return nil }
            Unmanaged<Box>.fromOpaque(raw).takeRetainedValue().body()
            return nil
        }, box)
    precondition(rc == 0, "pthread_create failed")
    pthread_detach(thread)
}
