import CCurl

/// One request's state on the worker thread: its easy handle, the C memory handed to libcurl,
/// and the response being collected by the callbacks. Used only on the worker thread.
final class Transfer {
    let id: UInt64
    let easy: UnsafeMutableRawPointer
    let continuation: CheckedContinuation<Result<HTTPResponse, HTTPError>, Never>
    private let request: HTTPRequest
    private let userAgent: String
    private let parts: URLParts?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var errorBuffer: UnsafeMutablePointer<CChar>?

    private var headers: [HTTPHeader] = []
    private var body: [UInt8] = []
    private var headerBytes = 0
    private var exceededLimit = false

    /// `METHOD scheme://host[:port]/path`, safe for messages.
    var label: String { "\(request.method) \(parts?.redacted ?? URLParts.redact(request.url))" }

    init(job: Job, easy: UnsafeMutableRawPointer, userAgent: String) {
        self.id = job.id
        self.easy = easy
        self.continuation = job.continuation
        self.request = job.request
        self.userAgent = userAgent
        self.parts = URLParts(job.request.url)
    }

    /// Frees the header list and error buffer. Call after the handle is detached and reset.
    func freeResources() {
        if let headerList { ccurl_slist_free_all(headerList) }
        headerList = nil
        errorBuffer?.deallocate()
        errorBuffer = nil
    }

    /// Sets every option on the easy handle; nil on success.
    func configure() -> HTTPError? {
        var failed: CURLcode?
        func check(_ code: CURLcode) {
            if code != CURLE_OK, failed == nil { failed = code }
        }
        let context = Unmanaged.passUnretained(self).toOpaque()

        let size = Int(ccurl_error_size())
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
        buffer.initialize(repeating: 0, count: size)
        errorBuffer = buffer
        check(ccurl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, buffer))

        check(ccurl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        check(ccurl_easy_setopt_string(easy, CURLOPT_URL, request.url))
        check(ccurl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        check(ccurl_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"))
        check(ccurl_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 0))
        check(
            ccurl_easy_setopt_long(
                easy, CURLOPT_CONNECTTIMEOUT_MS, Int(milliseconds(request.connectTimeout, minimum: 1))))
        check(ccurl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, Int(milliseconds(request.timeout, minimum: 1))))
        check(ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1))
        check(ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2))
        check(ccurl_easy_setopt_string(easy, CURLOPT_USERAGENT, userAgent))
        if request.maxResponseBytes > 0 {
            // Fails early when Content-Length already says too much; 0 would mean "no limit".
            check(ccurl_easy_setopt_off_t(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxResponseBytes)))
        }
        check(ccurl_easy_setopt_write_function(easy, CURLOPT_WRITEFUNCTION, curlWriteBody))
        check(ccurl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context))
        check(ccurl_easy_setopt_write_function(easy, CURLOPT_HEADERFUNCTION, curlWriteHeader))
        check(ccurl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context))

        // Method and body.
        let method = request.method
        let sendsBody = !request.body.isEmpty || method == "POST" || method == "PUT" || method == "PATCH"
        if sendsBody {
            check(ccurl_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
            // COPYPOSTFIELDS copies POSTFIELDSIZE bytes, so the array need not outlive this call.
            request.body.withUnsafeBytes { bytes in
                if let base = bytes.baseAddress {
                    check(
                        ccurl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: base))
                    )
                } else {
                    check(ccurl_easy_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, ""))
                }
            }
            if method != "POST" {
                check(ccurl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method))
            }
        } else if method == "GET" {
            check(ccurl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1))
        } else if method == "HEAD" {
            check(ccurl_easy_setopt_long(easy, CURLOPT_NOBODY, 1))
        } else {
            check(ccurl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method))
        }

        // Headers. "Name;" sends an empty value ("Name:" would remove the header).
        var lines = request.headers.map { $0.value.isEmpty ? "\($0.name);" : "\($0.name): \($0.value)" }
        if sendsBody, !request.headers.contains(where: { $0.name.lowercased() == "expect" }) {
            lines.append("Expect:")  // no 100-continue round trip
        }
        for line in lines {
            guard let appended = ccurl_slist_append(headerList, line) else {
                check(CURLE_OUT_OF_MEMORY)
                break
            }
            headerList = appended
        }
        if let headerList {
            check(ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList))
        }

        guard let failed else { return nil }
        return .transport(
            code: Int(failed.rawValue),
            message: "\(label): libcurl rejected an option: \(String(cString: ccurl_easy_strerror(failed)))")
    }

    /// Body bytes from libcurl; false aborts the transfer.
    fileprivate func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if body.count + bytes.count > max(0, request.maxResponseBytes) {
            exceededLimit = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    /// One complete header line from libcurl (status line, field, or the blank line); false aborts.
    fileprivate func receiveHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        headerBytes += bytes.count
        if headerBytes > max(0, request.maxResponseBytes) {
            exceededLimit = true
            return false
        }
        var line = String(decoding: bytes, as: UTF8.self)
        while let last = line.last, last == "\r\n" || last == "\n" || last == "\r" { line.removeLast() }
        if line.isEmpty { return true }
        if line.hasPrefix("HTTP/") {
            headers.removeAll()  // a new (interim or final) response starts
            return true
        }
        if let first = line.first, first == " " || first == "\t" {
            // Obsolete line folding: continues the previous value.
            if let lastIndex = headers.indices.last {
                let more = trimmed(Substring(line))
                headers[lastIndex].value += headers[lastIndex].value.isEmpty ? more : " " + more
            }
            return true
        }
        guard let colon = line.firstIndex(of: ":") else { return true }
        let name = trimmed(line[..<colon]).lowercased()
        let value = trimmed(line[line.index(after: colon)...])
        if !name.isEmpty { headers.append(HTTPHeader(name: name, value: value)) }
        return true
    }

    /// The caller's result for a finished transfer with libcurl result `code`.
    func outcome(_ code: CURLcode) -> Result<HTTPResponse, HTTPError> {
        if code == CURLE_OK {
            var status = 0
            _ = ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            var urlPointer: UnsafeMutablePointer<CChar>?
            _ = ccurl_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &urlPointer)
            let effectiveURL = urlPointer.map { String(cString: $0) } ?? request.url
            var micros: curl_off_t = 0
            _ = ccurl_easy_getinfo_off_t(easy, CURLINFO_TOTAL_TIME_T, &micros)
            return .success(
                HTTPResponse(
                    status: status, headers: headers, body: body, effectiveURL: effectiveURL,
                    totalTime: .microseconds(micros)))
        }
        return .failure(error(for: code))
    }

    private func error(for code: CURLcode) -> HTTPError {
        var reason = errorBuffer.map { String(cString: $0) } ?? ""
        if reason.isEmpty { reason = String(cString: ccurl_easy_strerror(code)) }
        let detail = "\(label): \(reason)"
        switch code {
        case CURLE_WRITE_ERROR where exceededLimit, CURLE_FILESIZE_EXCEEDED:
            return .responseTooLarge(limit: request.maxResponseBytes)
        case CURLE_UNSUPPORTED_PROTOCOL:
            return .unsupportedScheme(parts?.scheme ?? "unknown")
        case CURLE_URL_MALFORMAT:
            return .invalidURL("\(parts?.redacted ?? URLParts.redact(request.url)): \(reason)")
        case CURLE_COULDNT_RESOLVE_HOST:
            return .couldNotResolve(host: parts?.host ?? "")
        case CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT:
            return .couldNotConnect(detail)
        case CURLE_OPERATION_TIMEDOUT:
            // A reused connection reports no connect time; the pre-transfer time says the request went out.
            var connectMicros: curl_off_t = 0
            var pretransferMicros: curl_off_t = 0
            _ = ccurl_easy_getinfo_off_t(easy, CURLINFO_CONNECT_TIME_T, &connectMicros)
            _ = ccurl_easy_getinfo_off_t(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransferMicros)
            let connected = connectMicros > 0 || pretransferMicros > 0
            return .timedOut(
                connected || request.timeout < request.connectTimeout ? request.timeout : request.connectTimeout)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
            CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND,
            CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_USE_SSL_FAILED,
            CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR,
            CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT:
            return .tls(detail)
        default:
            return .transport(code: Int(code.rawValue), message: detail)
        }
    }
}

private func trimmed(_ text: Substring) -> String {
    var text = text
    while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
    while let last = text.last, last == " " || last == "\t" { text.removeLast() }
    return String(text)
}

/// CURLOPT_WRITEFUNCTION; `context` is the unretained ``Transfer`` (kept alive by the worker).
private func curlWriteBody(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    guard let context else { return 0 }
    let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
    let length = size * count
    return transfer.receiveBody(UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : length)) ? length : 0
}

/// CURLOPT_HEADERFUNCTION; `context` is the unretained ``Transfer`` (kept alive by the worker).
private func curlWriteHeader(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    guard let context else { return 0 }
    let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
    let length = size * count
    return transfer.receiveHeader(UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : length)) ? length : 0
}
