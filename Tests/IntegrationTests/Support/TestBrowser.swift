import Foundation
import HTTP
import TestSupport

/// The system browser, for tests: brokerd runs it as `$BROWSER URL`; it hands the URL to the
/// test through a FIFO, and the test then acts as the person at the browser, over real HTTP
/// with the project's client: it loads the provider's sign-in page, posts its form, keeps the
/// provider's session cookie, and follows the redirect to the broker's loopback listener.
final class TestBrowser: @unchecked Sendable {
    /// `BROWSER` for brokerd's environment.
    let command: String
    private let fifo: String
    /// Where the command writes its arguments, a line per run.
    private let argumentsFile: String
    private let state = NSCondition()
    private var opened: [String] = []
    private var taken = 0
    /// Cookies by origin (scheme, host and port): the provider's and the broker's listener are apart.
    private var cookies: [String: [String: String]] = [:]
    private var visited: [String] = []

    /// Every URL the browser loaded, redirects included (authorization codes travel in them).
    var visitedURLs: [String] { state.withLock { visited } }

    init(in directory: TemporaryDirectory) throws {
        fifo = directory.path + "/browser.fifo"
        guard mkfifo(fifo, 0o600) == 0 else {
            throw ProcessFailure("mkfifo \(fifo): \(String(cString: strerror(errno)))")
        }
        argumentsFile = directory.path + "/browser.arguments"
        command = try directory.write(
            "browser.sh", "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '\(argumentsFile)'\nprintf '%s\\n' \"$1\" > '\(fifo)'\n")
        chmod(command, 0o700)
        // O_RDWR: the open does not wait for a writer, and reads never see end of file between URLs.
        let descriptor = open(fifo, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { throw ProcessFailure("open \(fifo): \(String(cString: strerror(errno)))") }
        let reader = Thread { [weak self] in Self.read(descriptor, into: self) }
        reader.start()
    }

    deinit {
        // Wakes the reader so that it closes the FIFO and ends.
        let descriptor = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        if descriptor >= 0 {
            _ = "\u{4}\n".withCString { write(descriptor, $0, 2) }
            close(descriptor)
        }
    }

    private static func read(_ descriptor: Int32, into browser: TestBrowser?) {
        weak let browser = browser
        var pending = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            pending += String(decoding: buffer[..<count], as: UTF8.self)
            var lines: [String] = []
            while let newline = pending.firstIndex(of: "\n") {
                lines.append(String(pending[..<newline]))
                pending = String(pending[pending.index(after: newline)...])
            }
            if lines.contains("\u{4}") { break }
            guard let browser else { break }
            browser.state.withLock {
                browser.opened += lines
                browser.state.broadcast()
            }
        }
        close(descriptor)
    }

    /// The next URL brokerd opened, waiting at most `timeout` (on a thread of its own: the wait
    /// may be for work of this very test process, which needs the shared pool's few threads).
    func nextURL(timeout: Duration = .seconds(20)) async throws -> String {
        try await offThePool { try self.waitForURL(timeout: timeout) }
    }

    private func waitForURL(timeout: Duration) throws -> String {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        state.lock()
        defer { state.unlock() }
        while taken == opened.count {
            if !state.wait(until: deadline) {
                throw ProcessFailure("brokerd opened no URL in the browser within \(timeout)")
            }
        }
        taken += 1
        return opened[taken - 1]
    }

    /// Every command line brokerd ran the browser with (its arguments, space-separated), oldest first.
    var commandLines: [String] {
        ((try? String(contentsOfFile: argumentsFile, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The provider's URL behind brokerd's one-time start address `start`: what the browser is sent
    /// on to (the start address is then used up).
    func providerURL(behind start: String) async throws -> String {
        guard start.hasPrefix("http://127.0.0.1:"), start.contains("/start/") else {
            throw ProcessFailure("brokerd opened \(start), not a one-time local start address")
        }
        let response = try await HTTPClient.shared.send(.get(start))
        guard response.status == 303, let location = response.header("Location") else {
            throw ProcessFailure("the start address answered \(response.status), not a redirect")
        }
        state.withLock { visited.append(start) }
        return location
    }

    /// The provider's URL behind the next page brokerd opened.
    func nextProviderURL(timeout: Duration = .seconds(20)) async throws -> String {
        try await providerURL(behind: try await nextURL(timeout: timeout))
    }

    /// How many URLs brokerd has opened so far.
    var openedCount: Int { state.withLock { opened.count } }

    /// What the person saw at the end of a visit.
    enum Outcome: Equatable {
        /// The provider showed its sign-in form (it wants credentials).
        case signInForm
        /// The browser ended on a page that is not a redirect (the broker's "you can close this window", a provider
        /// page).
        case page(status: Int, text: String)
    }

    /// Opens `url` and follows redirects, as a browser does; stops at a page, or before loading an
    /// address `stop` picks (then the outcome is a page of status 0 at that address, unloaded).
    @discardableResult
    func visit(_ url: String, stoppingBefore stop: (String) -> Bool = { _ in false }) async throws -> (
        outcome: Outcome, lastURL: String, body: String, shown: Date
    ) {
        let shown = Date()
        var next = url
        for _ in 0..<10 {
            if stop(next) { return (.page(status: 0, text: ""), next, "", shown) }
            state.withLock { visited.append(next) }
            let response = try await HTTPClient.shared.send(.get(next, headers: cookieHeader(for: next)))
            remember(response, from: next)
            if (300..<400).contains(response.status), let location = response.header("Location") {
                next = location
                continue
            }
            let body = response.bodyText
            if body.contains("<form") && body.contains("name=\"password\"") {
                return (.signInForm, next, body, shown)
            }
            return (.page(status: response.status, text: body), next, body, shown)
        }
        throw ProcessFailure("more than 10 redirects from \(url)")
    }

    /// Opens `url`; if the provider asks for credentials, types them into its form and submits it;
    /// then follows the redirects to the end. Returns the final page.
    @discardableResult
    func signIn(at url: String, username: String, password: String) async throws -> Outcome {
        let first = try await visit(url)
        guard first.outcome == .signInForm else { return first.outcome }
        try await Self.typeCredentials(since: first.shown)
        let form = try Self.form(in: first.body)
        var fields = form.hidden
        fields.append(("username", username))
        fields.append(("password", password))
        let posted = try await HTTPClient.shared.send(
            .postForm(form.action, fields: fields, headers: cookieHeader(for: form.action)))
        remember(posted, from: form.action)
        guard (300..<400).contains(posted.status), let location = posted.header("Location") else {
            let text = posted.bodyText
            return text.contains("name=\"password\"") ? .signInForm : .page(status: posted.status, text: text)
        }
        return try await visit(location).outcome
    }

    /// A person takes seconds to type a password, and brokerd refuses an authentication it cannot
    /// tell from one made before the sign-in began (`auth_time` is whole seconds, and the two clocks
    /// are not compared): the form is posted from the whole second that follows 2 s after the page
    /// was asked for, never sooner. One of those seconds covers the rounding, the other the time
    /// brokerd's token request may take to reach idp-sim on a loaded machine. Not a
    /// synchronization: the time a person takes.
    private static func typeCredentials(since shown: Date) async throws {
        let due = (shown.timeIntervalSince1970 + 2).rounded(.down) + 1
        let wait = due - Date().timeIntervalSince1970
        if wait > 0 { try await Task.sleep(for: .milliseconds(Int((wait * 1000).rounded(.up)))) }
    }

    /// Signs in at `url` as ``signIn(at:username:password:)`` does, but stops before the provider's
    /// redirect to brokerd's loopback listener: returns that redirect's address (code and state).
    func redirectAfterSigningIn(at url: String, username: String, password: String) async throws -> String {
        guard
            let redirectURI = URLComponents(string: url)?.queryItems?.first(where: { $0.name == "redirect_uri" })?.value
        else { throw ProcessFailure("\(url) names no redirect_uri") }
        let loopback = { (next: String) in next.hasPrefix(redirectURI) && next.contains("state=") }
        let first = try await visit(url, stoppingBefore: loopback)
        if loopback(first.lastURL) { return first.lastURL }
        guard first.outcome == .signInForm else { throw ProcessFailure("the provider showed \(first.outcome)") }
        try await Self.typeCredentials(since: first.shown)
        let form = try Self.form(in: first.body)
        let posted = try await HTTPClient.shared.send(
            .postForm(
                form.action, fields: form.hidden + [("username", username), ("password", password)],
                headers: cookieHeader(for: form.action)))
        remember(posted, from: form.action)
        guard (300..<400).contains(posted.status), let location = posted.header("Location") else {
            throw ProcessFailure("the provider answered the sign-in form with \(posted.status)")
        }
        let last = try await visit(location, stoppingBefore: loopback)
        guard loopback(last.lastURL) else { throw ProcessFailure("the browser ended on \(last.lastURL)") }
        return last.lastURL
    }

    /// Whether the browser holds a cookie for `url`'s origin.
    func hasCookies(for url: String) -> Bool { state.withLock { !(cookies[Self.origin(url)] ?? [:]).isEmpty } }

    // MARK: HTML and cookies, as much as idp-sim's pages need

    private static func form(in html: String) throws -> (action: String, hidden: [(String, String)]) {
        guard let action = attribute("action", in: html) else {
            throw ProcessFailure("the sign-in page has no form action")
        }
        var hidden: [(String, String)] = []
        var rest = html[...]
        while let start = rest.range(of: "<input type=\"hidden\"") {
            let tag = rest[start.lowerBound...].prefix { $0 != ">" }
            if let name = attribute("name", in: String(tag)), let value = attribute("value", in: String(tag)) {
                hidden.append((name, value))
            }
            rest = rest[start.upperBound...]
        }
        return (action, hidden)
    }

    private static func attribute(_ name: String, in html: String) -> String? {
        guard let start = html.range(of: " \(name)=\"") else { return nil }
        let value = html[start.upperBound...].prefix { $0 != "\"" }
        return String(value).replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'")
            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    /// Keeps `Set-Cookie`s for the origin that set them (paths and domains are not needed here).
    private func remember(_ response: HTTPResponse, from url: String) {
        let origin = Self.origin(url)
        state.withLock {
            for header in response.headers where header.name.lowercased() == "set-cookie" {
                let attributes = header.value.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
                guard let pair = attributes.first, let equals = pair.firstIndex(of: "=") else { continue }
                let name = String(pair[..<equals])
                let value = String(pair[pair.index(after: equals)...])
                let expired = value.isEmpty || attributes.contains { $0.lowercased() == "max-age=0" }
                cookies[origin, default: [:]][name] = expired ? nil : value
            }
        }
    }

    private func cookieHeader(for url: String) -> [HTTPHeader] {
        state.withLock {
            guard let jar = cookies[Self.origin(url)], !jar.isEmpty else { return [] }
            return [HTTPHeader("Cookie", jar.map { "\($0.key)=\($0.value)" }.joined(separator: "; "))]
        }
    }

    /// `http://127.0.0.1:PORT` of `http://127.0.0.1:PORT/path?query`.
    static func origin(_ url: String) -> String {
        guard let components = URLComponents(string: url) else { return url }
        return "\(components.scheme ?? "")://\(components.host ?? ""):\(components.port ?? 0)"
    }
}
