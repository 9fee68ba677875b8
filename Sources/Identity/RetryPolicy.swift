import HTTP

/// Whether a request to the provider may be sent again after a failure whose outcome is unknown.
///
/// RFC 9110 9.2.2: a client may retry an idempotent request on its own; a request that is not
/// idempotent may be retried only when the server clearly did not process it.
public enum Replay: Sendable, Equatable {
    /// Idempotent or safe: discovery, the JWKS, userinfo (GET), and RFC 7009 revocation (revoking
    /// twice is the same as once). Retried after any transient failure.
    case idempotent
    /// Spends something the provider accepts once: a refresh token that rotates (reuse revokes
    /// its whole family), an authorization code, a one-time code, a continuation token, or sends
    /// an email (native authentication's challenge). Retried only when the provider clearly did
    /// not process it: the connection was never made, or it answered 503 or 429.
    case oneTime
}

/// How one attempt failed, as far as the retry decision is concerned.
public enum AttemptFailure: Sendable, Equatable {
    /// No connection was made (refused, unreachable, DNS): the request never left the broker.
    case notSent(HTTPError)
    /// Connected, but no complete answer came: the provider may or may not have processed it.
    case noAnswer(HTTPError)
    /// Never worth retrying: the time ran out, the answer was too large, TLS failed, the request
    /// is malformed, the caller cancelled.
    case final(HTTPError)
    /// The provider answered with this status (5xx or 429), and `Retry-After` when it sent one.
    case status(Int, retryAfter: Duration?)

    /// Sorts an HTTP client failure.
    public init(_ error: HTTPError) {
        switch error {
        case .couldNotConnect, .couldNotResolve:
            self = .notSent(error)
        case .transport:
            self = .noAnswer(error)
        case .timedOut, .responseTooLarge, .tls, .invalidURL, .invalidRequest, .unsupportedScheme, .cancelled:
            self = .final(error)
        }
    }

    /// Whether a status is a failure the retry policy looks at (rather than an answer to read).
    public static func isRetryableStatus(_ status: Int) -> Bool {
        status == 429 || (500...599).contains(status)
    }
}

/// The broker's retry policy for provider requests: bounded attempts, exponential backoff with
/// jitter, `Retry-After` honoured up to a cap, and an overall time budget per broker call.
///
/// The defaults make the worst case explicit: a broker call that talks to the provider finishes
/// within ``budget`` (30 s), whatever the provider does. Each request has at most
/// ``requestTimeout`` (15 s, connect included) and at most ``connectTimeout`` (5 s) to connect,
/// both shortened to what is left of the budget. At most ``maxAttempts`` (3) tries per request.
///
/// What is retried (see ``Replay``):
/// - a connection that could not be made: always, nothing reached the provider;
/// - 503 and 429: always, the provider says it did not handle the request;
/// - 500, 502, 504, and a connection that broke before the answer: idempotent requests only,
///   because the provider may have processed a one-time request (a refresh that rotated its
///   token) and sending it again would trip its reuse detection;
/// - a timeout: never; a provider that took 15 s would most likely take 15 s again, and the
///   caller would wait twice as long for the same error;
/// - an answer that is not valid (garbage, truncated, too large): never; it would be the same.
public struct RetryPolicy: Sendable, Equatable {
    /// Tries per request, the first one included.
    public var maxAttempts: Int
    /// The backoff before the first retry; it doubles for each further retry.
    public var initialBackoff: Duration
    /// The backoff never exceeds this, before jitter.
    public var maxBackoff: Duration
    /// A `Retry-After` up to this is waited for; a longer one ends the call at once, saying when
    /// the provider wants to be asked again.
    public var maxRetryAfter: Duration
    /// The longest one broker call may spend talking to the provider, retries and waits included.
    public var budget: Duration
    /// Per request, connection included (the HTTP client's total timeout).
    public var requestTimeout: Duration
    /// Per request, to resolve the name and connect.
    public var connectTimeout: Duration
    /// Another try is started only if at least this much of the budget is left after the wait.
    public var minimumAttemptTime: Duration

    public init(
        maxAttempts: Int = 3, initialBackoff: Duration = .milliseconds(500), maxBackoff: Duration = .seconds(4),
        maxRetryAfter: Duration = .seconds(10), budget: Duration = .seconds(30),
        requestTimeout: Duration = HTTPRequest.defaultTimeout,
        connectTimeout: Duration = HTTPRequest.defaultConnectTimeout,
        minimumAttemptTime: Duration = .seconds(1)
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialBackoff = max(.zero, initialBackoff)
        self.maxBackoff = max(.zero, maxBackoff)
        self.maxRetryAfter = max(.zero, maxRetryAfter)
        self.budget = max(.zero, budget)
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.minimumAttemptTime = max(.zero, minimumAttemptTime)
    }

    /// The broker's policy.
    public static let standard = RetryPolicy()
    /// One try, no waiting; the budget still applies.
    public static let never = RetryPolicy(maxAttempts: 1)

    /// The backoff before retry number `retry` (1 for the first retry), before jitter:
    /// `initialBackoff * 2^(retry-1)`, at most `maxBackoff`.
    public func ceiling(retry: Int) -> Duration {
        var delay = initialBackoff
        var step = 1
        while step < retry && delay < maxBackoff {
            delay = delay * 2
            step += 1
        }
        return min(delay, maxBackoff)
    }

    /// The backoff with "equal jitter": uniformly in `[ceiling/2, ceiling]`, where `unit` in
    /// `[0, 1]` is the random draw. Half the delay is kept so retries never bunch up at zero;
    /// the other half spreads broker instances apart after a provider outage.
    public func backoff(retry: Int, unit: Double) -> Duration {
        let ceiling = self.ceiling(retry: retry)
        let fraction = 0.5 + 0.5 * min(1, max(0, unit))
        return ceiling * fraction
    }

    /// What to do after attempt number `attempt` (1-based) failed with `failure`.
    ///
    /// - Parameters:
    ///   - remaining: what is left of the call's budget now.
    ///   - unit: a random draw in `[0, 1]` for the jitter.
    public func decide(
        after failure: AttemptFailure, attempt: Int, replay: Replay, remaining: Duration,
        unit: Double
    ) -> RetryDecision {
        let retryAfter: Duration?
        switch failure {
        case .final:
            return .giveUp(.notRetryable)
        case .notSent:
            retryAfter = nil
        case .noAnswer:
            guard replay == .idempotent else { return .giveUp(.mayHaveBeenProcessed) }
            retryAfter = nil
        case .status(let status, let after):
            switch status {
            case 429, 503:
                break
            case 500...599:
                guard replay == .idempotent else { return .giveUp(.mayHaveBeenProcessed) }
            default:
                return .giveUp(.notRetryable)
            }
            retryAfter = after
        }
        guard attempt < maxAttempts else { return .giveUp(.attemptsExhausted) }
        if let retryAfter, retryAfter > maxRetryAfter { return .giveUp(.retryAfterTooLong(retryAfter)) }
        // Never earlier than the provider asked, never without jitter.
        let delay = max(retryAfter ?? .zero, backoff(retry: attempt, unit: unit))
        guard remaining - delay >= minimumAttemptTime else { return .giveUp(.budgetExhausted) }
        return .retry(after: delay)
    }

    /// `Retry-After` (RFC 9110 10.2.3) in delta-seconds; nil when absent or not a plain number
    /// of seconds (an HTTP-date is ignored, and the usual backoff applies).
    public static func retryAfter(_ value: String?) -> Duration? {
        guard let value else { return nil }
        let trimmed = value.trimmingSpaces
        guard !trimmed.isEmpty, trimmed.utf8.count <= 9, trimmed.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let seconds = Int64(trimmed)
        else { return nil }
        return .seconds(seconds)
    }
}

/// The outcome of ``RetryPolicy/decide(after:attempt:replay:remaining:unit:)``.
public enum RetryDecision: Sendable, Equatable {
    case retry(after: Duration)
    case giveUp(GiveUpReason)
}

/// Why a failed request is not tried again.
public enum GiveUpReason: Sendable, Equatable {
    /// The failure would be the same next time (or the caller cancelled).
    case notRetryable
    /// A one-time request may have reached the provider; sending it again could spend its token twice.
    case mayHaveBeenProcessed
    /// ``RetryPolicy/maxAttempts`` tries were made.
    case attemptsExhausted
    /// The provider asked to wait longer than ``RetryPolicy/maxRetryAfter``.
    case retryAfterTooLong(Duration)
    /// Not enough of the call's budget is left for the wait and another try.
    case budgetExhausted
}

extension String {
    fileprivate var trimmingSpaces: Substring {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return slice
    }
}
