import CCurl

/// An HTTP/1.1 and HTTP/2 client over libcurl.
///
/// One worker thread per client owns a libcurl multi handle and drives every transfer while there
/// are some (it ends, and libcurl is unloaded, once the client has been idle for a while);
/// ``send(_:)`` hands a request to it and suspends until the transfer ends, so many requests
/// can be in flight at once without blocking Swift concurrency threads.
///
/// Fixed policy: only `http` and `https`; redirects are never followed (3xx comes back as a
/// response); TLS peer and host verification stay on, against the system trust store; connect
/// and total timeouts are always bounded; proxies follow libcurl's usual environment variables.
public final class HTTPClient: Sendable {
    /// A process-wide client, created on first use. Its worker thread runs while it has work
    /// (and ``defaultIdleRelease`` after).
    public static let shared = HTTPClient()

    /// The `User-Agent` sent with every request.
    public let userAgent: String

    private let worker: CurlWorker

    /// How long the client keeps libcurl after its last transfer, by default: a minute.
    public static let defaultIdleRelease: Duration = .seconds(60)

    /// Creates a client with its own worker thread, stopped when the client is released.
    /// Control characters in `userAgent` are removed. After `idleRelease` without a transfer the
    /// worker lets libcurl go (its connections, the thread, and the libraries only libcurl
    /// needed, with their writable data: about 0.4 MiB of a daemon's private memory, see
    /// BENCHMARKS.md); the next request loads it again.
    public init(userAgent: String = "shared-device-broker", idleRelease: Duration = HTTPClient.defaultIdleRelease) {
        let clean = String(userAgent.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        self.userAgent = clean
        self.worker = CurlWorker(userAgent: clean, idleRelease: idleRelease)
    }

    deinit {
        worker.shutdown()
    }

    /// Whether its worker thread runs (and holds libcurl) now.
    var workerRunning: Bool { worker.running }

    /// Ends every transfer (as cancelled) and stops the worker thread; later requests fail at
    /// once. For a process about to exit: exit tears libcurl and its TLS library down, and a
    /// transfer still running on the worker thread then crashes the process.
    public func stop() async {
        await worker.stopAndWait()
    }

    /// Sends `request` and returns the response, whatever its status.
    ///
    /// Cancelling the calling task aborts the transfer and throws ``HTTPError/cancelled``.
    /// - Throws: ``HTTPError`` when no complete response arrived within the request's limits.
    public func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        if let problem = validate(request) { throw problem }
        let worker = self.worker
        let id = worker.makeID()
        defer { worker.forget(id) }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<HTTPResponse, HTTPError>, Never>) in
                worker.enqueue(Job(id: id, request: request, continuation: continuation))
            }
        } onCancel: {
            worker.cancel(id)
        }
        return try result.get()
    }
}

/// Checks what can be checked without libcurl; nil if the request may be handed to it.
func validate(_ request: HTTPRequest) -> HTTPError? {
    guard let parts = URLParts(request.url) else {
        return .invalidURL("\(URLParts.redact(request.url)): an absolute http:// or https:// URL is required")
    }
    guard parts.scheme == "http" || parts.scheme == "https" else {
        return .unsupportedScheme(parts.scheme)
    }
    if parts.host.isEmpty {
        return .invalidURL("\(parts.redacted): the URL has no host")
    }
    if request.url.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) {
        return .invalidURL("\(parts.redacted): the URL contains spaces or control characters")
    }
    if !isToken(request.method) {
        return .invalidRequest("the method is not an HTTP token")
    }
    for header in request.headers {
        if !isToken(header.name) {
            return .invalidRequest("a header name is not an HTTP token")
        }
        if header.value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) {
            return .invalidRequest("the value of header '\(header.name)' contains CR, LF or NUL")
        }
    }
    return nil
}

/// RFC 9110 token: one or more visible ASCII characters other than delimiters.
func isToken(_ string: String) -> Bool {
    !string.isEmpty
        && string.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "a")...UInt8(ascii: "z"):
                return true
            default:
                return "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }
}
