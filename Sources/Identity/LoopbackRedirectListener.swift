import Glibc
import Locking

/// The loopback listener of RFC 8252 (7.3): HTTP on 127.0.0.1, a port the system picks per flow,
/// or the first free one of the ports the administrator fixed (`loopbackRedirectPorts`) for a
/// provider that matches `redirect_uri` exactly. It serves two kinds of address:
///
/// - one-time start addresses, `/start/<random id>`: what the browser is given instead of the
///   provider's URL. Every uid reads every process's command line (`/proc/PID/cmdline`), so the
///   authorization URL (its `state`, PKCE challenge, port) or an end-session URL (its
///   `id_token_hint`) on the browser's command line would be anyone's. A start address answers
///   one request with a 303 to the real URL, and is then gone.
/// - the redirect, `/?code=...&state=...`: the query parameters of the one request that carries
///   this flow's `state` end the wait (``waitForRedirect()``).
///
/// Any program on the machine can find the port and connect. So the listener serves only
/// connections whose peer socket belongs to brokerd's own uid (``PeerUser``): a connection of any
/// other uid, or one whose owner cannot be found, is answered 403 at once, before a byte of it is
/// read. Another user therefore can neither take the provider's URL from a start address nor hand
/// the flow a code of their own with its `state`. Connections of brokerd's uid are read by one
/// thread with `poll`, each for at most ``connectionDeadlineMilliseconds`` to send its request
/// line; past ``maximumConnections`` idle ones, the oldest is closed. Nothing waits in the
/// kernel's queue behind idle connections, so the browser's request is read as soon as it is
/// sent (RFC 8252, 8.3).
final class LoopbackRedirectListener: Sendable {
    static let maximumConnections = 32
    static let connectionDeadlineMilliseconds = 3000
    /// The longest request line read: an authorization response is far shorter.
    static let maximumRequestBytes = 16384

    /// The port the system chose, or the one of `ports` that was free.
    let port: UInt16
    private let shared: Shared

    /// What the serving thread and the waiter share.
    private final class Shared: Sendable {
        struct State {
            var closed = false
            var redirect: [String: String]?
            var waiter: CheckedContinuation<[String: String]?, Never>?
            /// Start addresses not yet served: id -> the URL they send the browser on to.
            var starts: [String: String] = [:]
        }
        let state = Locked(State())
        /// The write end of the pipe that wakes the serving thread's `poll`.
        let wake: Int32

        init(wake: Int32) { self.wake = wake }

        // Closed only when nobody can call `finish` any more: the serving thread may end (on its
        // own deadline) while a flow's cancel still holds this and writes to the pipe.
        deinit { close(wake) }

        var isClosed: Bool { state.withLock { $0.closed } }

        /// Ends the wait with `redirect` (nil: shut down) and stops serving; the first call wins.
        func finish(with redirect: [String: String]?) {
            let (first, waiter) = state.withLock { state -> (Bool, CheckedContinuation<[String: String]?, Never>?) in
                guard !state.closed else { return (false, nil) }
                state.closed = true
                state.redirect = redirect
                state.starts = [:]
                defer { state.waiter = nil }
                return (true, state.waiter)
            }
            guard first else { return }
            // Wakes the serving thread, which closes its descriptors; this one goes with `Shared`.
            var byte: UInt8 = 1
            _ = write(wake, &byte, 1)
            waiter?.resume(returning: redirect)
        }
    }

    /// Listens on a new loopback port: one the system picks, or with `ports` the first of them no
    /// other socket listens on (``IdentityError/redirectPortsTaken(_:)`` when every one is taken).
    /// `expectedState` is the flow's `state` (nil: the listener only serves start addresses, and
    /// ends once they have been served). Whatever happens, it stops serving after `lifetime`.
    init(expectedState: String?, lifetime: Duration, ports: ClosedRange<UInt16>? = nil) throws(IdentityError) {
        guard let peers = PeerUser() else {
            throw IdentityError.badResponse(
                "cannot ask the kernel which user connects to the loopback listener (a NETLINK_SOCK_DIAG socket: "
                    + "\(String(cString: strerror(errno)))); a sandbox must allow AF_NETLINK")
        }
        let (fd, chosen) = try Self.listen(on: ports)
        guard let pipe = Pipe.make(nonBlocking: true) else {
            close(fd)
            throw IdentityError.badResponse("cannot listen on a loopback port for the redirect")
        }
        Self.makeNonBlocking(fd)
        port = chosen
        let shared = Shared(wake: pipe.write)
        self.shared = shared
        let server = Server(
            listener: fd, wakeRead: pipe.read, port: port, expectedState: expectedState, shared: shared,
            endOfLife: Self.monotonicMilliseconds() + Int(lifetime.components.seconds) * 1000, peers: peers)
        Thread.detach { server.run() }
    }

    /// `http://127.0.0.1:PORT/`.
    var redirectURI: String { "http://127.0.0.1:\(port)/" }

    /// A listening socket on 127.0.0.1 and its port: the system's choice, or the first of `ports`
    /// free. A port of `ports` counts as taken only while a socket listens on it (another program,
    /// another sign-in's listener): `SO_REUSEADDR` lets a port whose last sign-in's connections
    /// linger in TIME_WAIT be listened on again at once, as a fixed port must be, and never lets
    /// two sockets listen on one port.
    private static func listen(on ports: ClosedRange<UInt16>?) throws(IdentityError) -> (Int32, UInt16) {
        for candidate in ports.map(Array.init) ?? [0] {
            let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw IdentityError.badResponse("cannot open a loopback socket for the redirect") }
            if ports != nil {
                var on: Int32 = 1
                _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
            address.sin_port = candidate.bigEndian
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            // The kernel's largest queue: a flood is accepted (and refused) by the serving thread at
            // once rather than left in a short queue that the browser's connection would wait behind.
            let listening = bound == 0 && Glibc.listen(fd, SOMAXCONN) == 0
            let failure = errno
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named =
                listening
                && withUnsafeMutablePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
                } == 0
            if named { return (fd, UInt16(bigEndian: address.sin_port)) }
            close(fd)
            guard ports != nil, !listening, failure == EADDRINUSE else {
                throw IdentityError.badResponse("cannot listen on a loopback port for the redirect")
            }
        }
        guard let ports else { throw IdentityError.badResponse("cannot listen on a loopback port for the redirect") }
        let named =
            ports.count == 1
            ? "port \(ports.lowerBound), which is" : "ports \(ports.lowerBound)-\(ports.upperBound), each of which is"
        throw IdentityError.redirectPortsTaken(
            "the browser cannot return to this sign-in: loopbackRedirectPorts in broker.conf allows only 127.0.0.1 "
                + "\(named) taken (by another sign-in in progress, or another program listening there); try again "
                + "when a sign-in has finished, or free the port, or give loopbackRedirectPorts more ports and "
                + "register their redirect URIs (http://127.0.0.1:PORT/) at the provider")
    }

    /// A one-time local address that sends the browser on to `target` (once, and only a browser of
    /// brokerd's own uid): what goes on a command line or to the desktop portal instead of `target`.
    func startAddress(redirectingTo target: String) -> String {
        let id = OIDCProvider.randomURLSafe(bytes: 24)
        shared.state.withLock { $0.starts[id] = target }
        return "http://127.0.0.1:\(port)/start/\(id)"
    }

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

    /// Stops serving; `waitForRedirect` returns nil.
    func shutDown() { shared.finish(with: nil) }

    static func monotonicMilliseconds() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now.tv_sec * 1000 + now.tv_nsec / 1_000_000
    }

    static func makeNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }

    /// The serving thread: accepts, checks each peer's uid, reads request lines, answers.
    /// `@unchecked`: handed to that thread at its start and used by it alone from then on; what
    /// others see of it goes through `shared`.
    private final class Server: @unchecked Sendable {
        /// A connection of brokerd's uid that has not yet sent its request line.
        struct Connection {
            let fd: Int32
            let deadline: Int
            var bytes: [UInt8] = []
        }

        let listener: Int32
        let wakeRead: Int32
        let port: UInt16
        let expectedState: String?
        let shared: Shared
        let endOfLife: Int
        let ownUser = geteuid()
        let peers: PeerUser
        /// Oldest first.
        var connections: [Connection] = []

        init(
            listener: Int32, wakeRead: Int32, port: UInt16, expectedState: String?, shared: Shared, endOfLife: Int,
            peers: PeerUser
        ) {
            self.peers = peers
            self.listener = listener
            self.wakeRead = wakeRead
            self.port = port
            self.expectedState = expectedState
            self.shared = shared
            self.endOfLife = endOfLife
        }

        func run() {
            defer {
                // Whatever ended the loop, the waiter hears of it before the wake-up pipe is closed.
                shared.finish(with: nil)
                for connection in connections { close(connection.fd) }
                peers.close()
                close(listener)
                close(wakeRead)
            }
            while !shared.isClosed {
                let now = LoopbackRedirectListener.monotonicMilliseconds()
                if now >= endOfLife {
                    shared.finish(with: nil)
                    return
                }
                // The next deadline: the oldest connection's (the first), or the listener's end.
                let due = min(connections.first?.deadline ?? endOfLife, endOfLife)
                var descriptors =
                    [
                        pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                        pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
                    ]
                    + connections.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
                let ready = poll(&descriptors, nfds_t(descriptors.count), Int32(max(0, min(due - now, 60_000))))
                if ready < 0 && errno != EINTR { return }
                if shared.isClosed { return }
                // Requests first, so that the browser's is answered before a flood could push it out.
                var index = connections.count - 1
                while index >= 0 {
                    if descriptors[index + 2].revents != 0 && !read(at: index) {
                        close(connections[index].fd)
                        connections.remove(at: index)
                    }
                    index -= 1
                }
                let later = LoopbackRedirectListener.monotonicMilliseconds()
                connections.removeAll { connection in
                    guard connection.deadline <= later else { return false }
                    close(connection.fd)
                    return true
                }
                if descriptors[0].revents != 0 { acceptWaiting() }
            }
        }

        /// Accepts the connections waiting: another uid's is refused at once; brokerd's own is read.
        /// At most 256 in a round, so that a flood that never ends does not keep the connections
        /// already accepted from being read.
        private func acceptWaiting() {
            for _ in 0..<256 {
                guard !shared.isClosed else { return }
                var peer = sockaddr_in()
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let client = withUnsafeMutablePointer(to: &peer) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(listener, $0, &length) }
                }
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return
                }
                LoopbackRedirectListener.makeNonBlocking(client)
                guard peer.sin_family == sa_family_t(AF_INET),
                    peers.owner(of: peer, connectedTo: port) == ownUser
                else {
                    refuse(client)
                    continue
                }
                if connections.count >= LoopbackRedirectListener.maximumConnections {
                    close(connections.removeFirst().fd)
                }
                connections.append(
                    Connection(
                        fd: client,
                        deadline: LoopbackRedirectListener.monotonicMilliseconds()
                            + LoopbackRedirectListener.connectionDeadlineMilliseconds))
                // A browser sends its request with the connection: read it now, before more arrive.
                if !read(at: connections.count - 1) {
                    close(connections.removeLast().fd)
                }
            }
        }

        /// Reads what connection `index` has sent; false when it is done with (answered, closed, too long).
        private func read(at index: Int) -> Bool {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let fd = connections[index].fd
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count < 0 && errno == EINTR { continue }
                if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return true }
                guard count > 0 else { return false }
                connections[index].bytes += buffer[0..<count]
                let bytes = connections[index].bytes
                if let end = bytes.firstIndex(of: UInt8(ascii: "\n")) {
                    answer(fd, requestLine: bytes[..<end])
                    return false
                }
                if bytes.count > LoopbackRedirectListener.maximumRequestBytes { return false }
            }
        }

        /// Another uid's connection, or one whose owner is unknown: a short page, nothing read.
        private func refuse(_ fd: Int32) {
            respond(
                fd, status: "403 Forbidden",
                body: "This sign-in belongs to another user of this computer.")
            shutdown(fd, Int32(SHUT_WR))
            close(fd)
        }

        private func answer(_ fd: Int32, requestLine: ArraySlice<UInt8>) {
            let words = String(decoding: requestLine, as: UTF8.self).split(separator: " ")
            guard words.count == 3, words[0] == "GET" else {
                respond(fd, status: "400 Bad Request", body: "Not a request this address answers.")
                return
            }
            let target = String(words[1])
            let mark = target.firstIndex(of: "?")
            let path = mark.map { String(target[..<$0]) } ?? target
            let query = mark.map { String(target[target.index(after: $0)...]) }
            if path.hasPrefix("/start/") {
                serveStart(fd, id: String(path.dropFirst("/start/".count)))
                return
            }
            guard let expectedState, path == "/", let parameters = query.map(FormDecoding.decode),
                let state = parameters["state"]
            else {
                respond(fd, status: "404 Not Found", body: "Not found.")
                return
            }
            guard constantTimeEqual(state, expectedState) else {
                respond(
                    fd, status: "400 Bad Request",
                    body: "This address does not belong to the sign-in in progress. Return to the app.")
                return
            }
            respond(
                fd, status: "200 OK",
                body: parameters["error"] != nil
                    ? "Sign-in did not complete. You can close this window and return to the app."
                    : "Return to the app to finish signing in. You can close this window.")
            shared.finish(with: parameters)
        }

        private func serveStart(_ fd: Int32, id: String) {
            let (target, nothingLeft) = shared.state.withLock { state -> (String?, Bool) in
                let target = state.starts.removeValue(forKey: id)
                return (target, state.starts.isEmpty)
            }
            guard let target else {
                respond(
                    fd, status: "404 Not Found",
                    body: "This sign-in address has been used already or has expired. Return to the app.")
                return
            }
            respond(fd, status: "303 See Other", body: "Continue to the sign-in page.", location: target)
            // A listener of start addresses alone has nothing more to serve.
            if expectedState == nil && nothingLeft { shared.finish(with: nil) }
        }

        private func constantTimeEqual(_ a: String, _ b: String) -> Bool {
            let x = Array(a.utf8)
            let y = Array(b.utf8)
            guard x.count == y.count else { return false }
            return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
        }

        /// Sends a short page without waiting: it fits the socket's buffer.
        private func respond(_ fd: Int32, status: String, body: String, location: String? = nil) {
            let html =
                "<!doctype html><html><head><meta "
                + "charset=\"utf-8\"><title>Sign-in</title></head><body><p>\(body)</p></body></html>"
            let redirect = location.map { "Location: \($0)\r\nReferrer-Policy: no-referrer\r\n" } ?? ""
            let response =
                "HTTP/1.1 \(status)\r\n\(redirect)Content-Type: text/html; charset=utf-8\r\nContent-Length: "
                + "\(html.utf8.count)\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n\(html)"
            let bytes = Array(response.utf8)
            _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
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
