import BrokerCore
import HTTP
import JSON
import Logging

/// The one way the Identity layer sends a request to the provider: the retry policy, the call's
/// time budget, and failures turned into errors that say where, what and how often.
///
/// Transport, clock, sleep and randomness are injected, so tests run the policy without a
/// network and without really waiting.
struct ProviderHTTP: Sendable {
    typealias Transport = @Sendable (HTTPRequest) async throws(HTTPError) -> HTTPResponse
    typealias Sleeper = @Sendable (Duration) async throws -> Void

    let transport: Transport
    let policy: RetryPolicy
    let clock: any MonotonicClock
    let sleep: Sleeper
    let random: @Sendable () -> Double
    let logger: Logger?

    init(
        transport: @escaping Transport, policy: RetryPolicy = .standard,
        clock: any MonotonicClock = SystemMonotonicClock(),
        sleep: @escaping Sleeper = { try await Task.sleep(for: $0) },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }, logger: Logger? = nil
    ) {
        self.transport = transport
        self.policy = policy
        self.clock = clock
        self.sleep = sleep
        self.random = random
        self.logger = logger
    }

    init(http: HTTPClient, policy: RetryPolicy = .standard, logger: Logger? = nil) {
        self.init(
            transport: { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in try await http.send(request)
            },
            policy: policy, logger: logger)
    }

    // MARK: Budget

    /// The deadline of the broker call under way, in ``MonotonicClock`` time.
    @TaskLocal static var deadline: Duration?

    /// Runs `body` with the policy's budget as its deadline, unless an enclosing call already set
    /// one (the outer, earlier deadline wins: a nested call never extends the bound).
    func withBudget<T, Failure: Error>(_ body: () async throws(Failure) -> T) async throws(Failure) -> T {
        let mine = clock.now() + policy.budget
        let deadline = Self.deadline.map { min($0, mine) } ?? mine
        let result: Result<T, Failure> = await Self.$deadline.withValue(deadline) {
            do throws(Failure) { return .success(try await body()) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// What is left of the current call's budget (the whole budget outside of any call).
    var remaining: Duration {
        guard let deadline = Self.deadline else { return policy.budget }
        return deadline - clock.now()
    }

    // MARK: Sending

    /// Sends `request`, retrying as the policy allows, and returns the provider's answer.
    ///
    /// Statuses other than 5xx and 429 come back as responses for the caller to read (a 400
    /// with an OAuth error, a 404 for an endpoint the provider lacks). 5xx and 429, once the
    /// policy gives up, and transport failures are thrown as ``IdentityError/unavailable(_:)``
    /// (the provider is down, slow or says so), ``IdentityError/serverFailure(_:)`` (it failed
    /// with 500 or another server error) or ``IdentityError/badResponse(_:)`` (too large).
    ///
    /// - Parameter what: the request in words, for messages ("the token request").
    func send(_ request: HTTPRequest, what: String, replay: Replay) async throws(IdentityError) -> HTTPResponse {
        let host = Self.host(of: request.url)
        var attempt = 0
        while true {
            attempt += 1
            let left = remaining
            guard left > .zero else {
                throw IdentityError.unavailable(
                    "the identity provider at \(host) did not finish \(what) within the broker's "
                        + "\(Self.seconds(policy.budget)) limit for one call\(Self.tries(attempt - 1)); try again later"
                )
            }
            var attemptRequest = request
            attemptRequest.timeout = min(request.timeout, policy.requestTimeout, left)
            attemptRequest.connectTimeout = min(request.connectTimeout, policy.connectTimeout, attemptRequest.timeout)
            let budgetLimited = left < min(request.timeout, policy.requestTimeout)

            let attemptStarted = clock.now()
            let outcome: Result<HTTPResponse, HTTPError>
            do throws(HTTPError) {
                outcome = .success(try await transport(attemptRequest))
            } catch {
                outcome = .failure(error)
            }
            let failure: AttemptFailure
            let decision: RetryDecision
            switch outcome {
            case .success(let response):
                guard AttemptFailure.isRetryableStatus(response.status) else { return response }
                failure = .status(response.status, retryAfter: RetryPolicy.retryAfter(response.header("retry-after")))
                decision = decide(failure, attempt: attempt, replay: replay)
                if case .giveUp(let reason) = decision {
                    throw Self.statusError(response, host: host, what: what, attempts: attempt, reason: reason)
                }
            case .failure(let error):
                failure = AttemptFailure(error)
                decision = decide(failure, attempt: attempt, replay: replay)
                if case .giveUp(let reason) = decision {
                    throw Self.transportError(
                        error, host: host, what: what, attempts: attempt, reason: reason,
                        budget: budgetLimited ? policy.budget : nil, request: attemptRequest,
                        elapsed: clock.now() - attemptStarted)
                }
            }
            guard case .retry(let delay) = decision else { continue }
            logger?.notice(
                "identity provider request failed; retrying",
                metadata: [
                    "request": "\(what)", "host": "\(host)", "attempt": "\(attempt)",
                    "failure": "\(Self.describe(failure))",
                    "retryIn": "\(Self.milliseconds(delay)) ms",
                ])
            do {
                try await sleep(delay)
            } catch {
                throw IdentityError.cancelled
            }
        }
    }

    /// The decision for one failure; the random draw for the jitter happens here, once per failure.
    private func decide(_ failure: AttemptFailure, attempt: Int, replay: Replay) -> RetryDecision {
        policy.decide(after: failure, attempt: attempt, replay: replay, remaining: remaining, unit: random())
    }

    // MARK: Messages

    static func statusError(
        _ response: HTTPResponse, host: String, what: String, attempts: Int,
        reason: GiveUpReason
    ) -> IdentityError {
        let status = response.status
        var answered = "answered \(what) with HTTP \(status)"
        if let error = OAuthErrorBody(response.body) { answered += " (\(error.summary))" }
        answered += tries(attempts)
        switch reason {
        case .retryAfterTooLong(let wait):
            return .unavailable(
                "the identity provider at \(host) \(answered) and asks to wait \(seconds(wait)); try again after that")
        case .mayHaveBeenProcessed:
            // A 5xx to a one-time request: say why it was not sent again.
            let text =
                "the identity provider at \(host) \(answered); it was not sent again, as the provider may have used it"
            if (502...504).contains(status) { return .unavailable(text + "; try again later") }
            return .serverFailure(text + "; try again later, and tell the provider's administrator if it persists")
        default:
            switch status {
            case 429:
                return .unavailable(
                    "the identity provider at \(host) \(answered): it is limiting requests; try again later")
            case 502, 503, 504:
                return .unavailable("the identity provider at \(host) \(answered): it is unavailable; try again later")
            default:
                return .serverFailure(
                    "the identity provider at \(host) \(answered): it failed; try again later, "
                        + "and tell the provider's administrator if it persists")
            }
        }
    }

    /// - Parameters:
    ///   - request: the attempt as sent, with the timeouts it had.
    ///   - elapsed: how long the attempt took, by the sender's clock.
    static func transportError(
        _ error: HTTPError, host: String, what: String, attempts: Int, reason: GiveUpReason,
        budget: Duration?, request: HTTPRequest, elapsed: Duration
    ) -> IdentityError {
        switch error {
        case .cancelled:
            return .cancelled
        case .responseTooLarge(let limit):
            return .badResponse("the answer to \(what) is larger than \(bytes(limit)); the broker refused it")
        case .timedOut(let reported):
            // Which timeout fired, from what the attempt took: the client's report cannot tell
            // them apart on a reused connection.
            let connecting = reported != request.timeout && elapsed < request.connectTimeout + .milliseconds(500)
            if connecting && request.connectTimeout < request.timeout {
                return .unavailable(
                    "the identity provider at \(host) could not be connected to within "
                        + "\(seconds(request.connectTimeout)) for \(what)\(tries(attempts)); check the network and "
                        + "try again later"
                )
            }
            let after = request.timeout
            if let budget {
                return .unavailable(
                    "the identity provider at \(host) did not answer \(what) within \(seconds(after)), "
                        + "the rest of the broker's \(seconds(budget)) limit for one call\(tries(attempts)); try "
                        + "again later"
                )
            }
            return .unavailable(
                "the identity provider at \(host) did not answer \(what) within \(seconds(after))"
                    + "\(tries(attempts)); try again later")
        case .couldNotConnect:
            // The client's own text (request, libcurl's reason) goes to the log with each retry.
            return .unavailable(
                "the identity provider at \(host) could not be reached for \(what) (no connection could be made"
                    + (attempts > 1 ? ", \(attempts) tries" : "") + "); check the network and try again later")
        case .couldNotResolve:
            return .unavailable(
                "the identity provider's host \(host) could not be found for \(what)\(tries(attempts)); "
                    + "check the network and DNS, and try again later")
        case .tls:
            return .unavailable(
                "the secure connection to the identity provider at \(host) failed for \(what) (\(error))")
        case .transport:
            let note =
                reason == .mayHaveBeenProcessed ? "; it was not sent again, as the provider may have used it" : ""
            return .unavailable(
                "the connection to the identity provider at \(host) broke during \(what)\(tries(attempts))"
                    + " (\(error))\(note); try again later")
        case .invalidURL, .invalidRequest, .unsupportedScheme:
            return .badResponse("the broker could not send \(what) to \(host): \(error)")
        }
    }

    static func describe(_ failure: AttemptFailure) -> String {
        switch failure {
        case .notSent(let error), .noAnswer(let error), .final(let error): return "\(error)"
        case .status(let status, let retryAfter):
            return "HTTP \(status)" + (retryAfter.map { ", Retry-After \(seconds($0))" } ?? "")
        }
    }

    /// " (3 tries)", or nothing for one.
    static func tries(_ count: Int) -> String { count > 1 ? " (\(count) tries)" : "" }

    /// `15 s`, `1.5 s`, `250 ms`.
    static func seconds(_ duration: Duration) -> String {
        let ms = milliseconds(duration)
        if ms < 1000 { return "\(ms) ms" }
        if ms % 1000 == 0 { return "\(ms / 1000) s" }
        return "\(ms / 1000).\(ms % 1000 / 100) s"
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    static func bytes(_ count: Int) -> String {
        if count >= 1 << 20, count % (1 << 20) == 0 { return "\(count >> 20) MiB" }
        if count >= 1 << 10, count % (1 << 10) == 0 { return "\(count >> 10) KiB" }
        return "\(count) bytes"
    }

    /// `host[:port]` of a URL, for messages; never its path or query.
    static func host(of url: String) -> String {
        guard let separator = url.firstRange(of: "://") else { return "(unknown host)" }
        let rest = url[separator.upperBound...]
        var authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        return authority.isEmpty ? "(unknown host)" : String(authority)
    }
}

/// An OAuth error body's `error` and first line of `error_description`, if the body is one.
struct OAuthErrorBody {
    var error: String
    var description: String

    init?(_ body: [UInt8]) {
        guard !body.isEmpty, body.count <= 64 * 1024,
            let object = try? JSONValue.providerObject(body, what: "the error"), let error = object["error"]?.string,
            error.utf8.count <= 64, error.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else { return nil }
        self.error = error
        let text = object["error_description"]?.string ?? ""
        // The first line, then the outside-text rule: what is left is the provider's words, with
        // no control character to carry into a caller's error message.
        self.description = OutsideText.cleaned(
            String((text.split(whereSeparator: \.isNewline).first.map(String.init) ?? "").prefix(200)))
    }

    var summary: String { description.isEmpty ? error : "\(error): \(description)" }
}

/// Monotonic time as a duration since an arbitrary origin; tests substitute their own.
protocol MonotonicClock: Sendable {
    func now() -> Duration
}

struct SystemMonotonicClock: MonotonicClock {
    private static let origin = ContinuousClock.now
    func now() -> Duration { ContinuousClock.now - Self.origin }
}
