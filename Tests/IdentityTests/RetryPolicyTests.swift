import HTTP
import Locking
import Testing

@testable import Identity

/// The retry policy's arithmetic and decisions: no network, no clock, no sleeping.
@Suite struct RetryPolicyTests {
    let policy = RetryPolicy.standard

    @Test func theStandardFiguresAreTheDocumentedOnes() {
        #expect(policy.maxAttempts == 3)
        #expect(policy.initialBackoff == .milliseconds(500))
        #expect(policy.maxBackoff == .seconds(4))
        #expect(policy.maxRetryAfter == .seconds(10))
        #expect(policy.budget == .seconds(30))
        #expect(policy.requestTimeout == .seconds(15))
        #expect(policy.connectTimeout == .seconds(5))
    }

    @Test func backoffDoublesUpToItsCap() {
        #expect(policy.ceiling(retry: 1) == .milliseconds(500))
        #expect(policy.ceiling(retry: 2) == .seconds(1))
        #expect(policy.ceiling(retry: 3) == .seconds(2))
        #expect(policy.ceiling(retry: 4) == .seconds(4))
        #expect(policy.ceiling(retry: 5) == .seconds(4))
        #expect(policy.ceiling(retry: 1000) == .seconds(4))
    }

    @Test func jitterStaysBetweenHalfAndAllOfTheCeiling() {
        for retry in 1...6 {
            let ceiling = policy.ceiling(retry: retry)
            #expect(policy.backoff(retry: retry, unit: 0) == ceiling / 2)
            #expect(policy.backoff(retry: retry, unit: 1) == ceiling)
            #expect(policy.backoff(retry: retry, unit: -3) == ceiling / 2, "out-of-range draws are clamped")
            #expect(policy.backoff(retry: retry, unit: 7) == ceiling)
        }
        var generator = SystemRandomNumberGenerator()
        var seen = Set<Int64>()
        for _ in 0..<2000 {
            let retry = Int.random(in: 1...4, using: &generator)
            let delay = policy.backoff(retry: retry, unit: Double.random(in: 0...1, using: &generator))
            let ceiling = policy.ceiling(retry: retry)
            #expect(delay >= ceiling / 2 && delay <= ceiling)
            if retry == 1 { seen.insert(ProviderHTTP.milliseconds(delay)) }
        }
        #expect(seen.count > 50, "the draws spread over the interval")
    }

    @Test func retryAfterIsReadAsDeltaSeconds() {
        #expect(RetryPolicy.retryAfter("5") == .seconds(5))
        #expect(RetryPolicy.retryAfter(" 0 ") == .zero)
        #expect(RetryPolicy.retryAfter("120") == .seconds(120))
        for ignored in [nil, "", "-1", "1.5", "soon", "Wed, 21 Oct 2015 07:28:00 GMT", "99999999999999999999", "5 5"] {
            #expect(RetryPolicy.retryAfter(ignored) == nil, "\(String(describing: ignored))")
        }
    }

    // MARK: Decisions

    private func decide(
        _ failure: AttemptFailure, attempt: Int = 1, _ replay: Replay,
        remaining: Duration = .seconds(30), unit: Double = 1
    ) -> RetryDecision {
        policy.decide(after: failure, attempt: attempt, replay: replay, remaining: remaining, unit: unit)
    }

    @Test func aConnectionThatWasNeverMadeIsRetriedEvenForOneTimeRequests() {
        for error in [
            HTTPError.couldNotConnect("POST http://127.0.0.1:1/token: Connection refused"),
            .couldNotResolve(host: "idp.example"),
        ] {
            #expect(decide(.notSent(error), .oneTime) == .retry(after: .milliseconds(500)))
            #expect(decide(.notSent(error), .idempotent) == .retry(after: .milliseconds(500)))
        }
    }

    @Test func whatTheProviderMayHaveProcessedIsRetriedOnlyWhenIdempotent() {
        let broken = AttemptFailure.noAnswer(.transport(code: 56, message: "Connection reset by peer"))
        #expect(decide(broken, .oneTime) == .giveUp(.mayHaveBeenProcessed))
        #expect(decide(broken, .idempotent) == .retry(after: .milliseconds(500)))
        for status in [500, 502, 504, 599] {
            #expect(decide(.status(status, retryAfter: nil), .oneTime) == .giveUp(.mayHaveBeenProcessed), "\(status)")
            #expect(
                decide(.status(status, retryAfter: nil), .idempotent) == .retry(after: .milliseconds(500)), "\(status)")
        }
        // 503 and 429 say the provider did not handle the request: safe for a refresh too.
        for status in [503, 429] {
            #expect(
                decide(.status(status, retryAfter: nil), .oneTime) == .retry(after: .milliseconds(500)), "\(status)")
        }
    }

    @Test func timeoutsOversizedAnswersTLSAndCancellationAreNeverRetried() {
        for error in [
            HTTPError.timedOut(.seconds(15)), .responseTooLarge(limit: 1 << 20), .tls("bad certificate"), .cancelled,
            .invalidURL("x"),
        ] {
            #expect(AttemptFailure(error) == .final(error))
            #expect(decide(.final(error), .idempotent) == .giveUp(.notRetryable))
        }
        #expect(decide(.status(404, retryAfter: nil), .idempotent) == .giveUp(.notRetryable))
    }

    @Test func attemptsAreBounded() {
        let unavailable = AttemptFailure.status(503, retryAfter: nil)
        #expect(decide(unavailable, attempt: 1, .oneTime) == .retry(after: .milliseconds(500)))
        #expect(decide(unavailable, attempt: 2, .oneTime) == .retry(after: .seconds(1)))
        #expect(decide(unavailable, attempt: 3, .oneTime) == .giveUp(.attemptsExhausted))
        let once = RetryPolicy(maxAttempts: 1)
        #expect(
            once.decide(after: unavailable, attempt: 1, replay: .idempotent, remaining: .seconds(30), unit: 0)
                == .giveUp(.attemptsExhausted))
    }

    @Test func retryAfterIsHonouredUpToItsCap() {
        // Never earlier than asked, even when the backoff would be shorter.
        #expect(decide(.status(503, retryAfter: .seconds(2)), .oneTime) == .retry(after: .seconds(2)))
        #expect(decide(.status(429, retryAfter: .seconds(10)), .oneTime) == .retry(after: .seconds(10)))
        #expect(decide(.status(503, retryAfter: .zero), .oneTime, unit: 0) == .retry(after: .milliseconds(250)))
        // Longer than the cap: the call ends now, saying how long the provider wants.
        #expect(decide(.status(503, retryAfter: .seconds(11)), .oneTime) == .giveUp(.retryAfterTooLong(.seconds(11))))
        #expect(
            decide(.status(503, retryAfter: .seconds(3600)), .idempotent) == .giveUp(.retryAfterTooLong(.seconds(3600)))
        )
        // A Retry-After on a status that is not retried does not make it retried.
        #expect(decide(.status(500, retryAfter: .seconds(1)), .oneTime) == .giveUp(.mayHaveBeenProcessed))
    }

    @Test func aRetryMustFitInWhatIsLeftOfTheBudget() {
        let unavailable = AttemptFailure.status(503, retryAfter: .seconds(5))
        #expect(decide(unavailable, .oneTime, remaining: .seconds(6)) == .retry(after: .seconds(5)))
        #expect(decide(unavailable, .oneTime, remaining: .milliseconds(5999)) == .giveUp(.budgetExhausted))
        #expect(
            decide(.status(503, retryAfter: nil), .oneTime, remaining: .milliseconds(1200), unit: 1)
                == .giveUp(.budgetExhausted))
    }
}

// MARK: - The sender, with a fake transport and fake time

/// Monotonic time the test moves: sleeping and slow transports advance it; nothing really waits.
final class FakeTime: MonotonicClock, @unchecked Sendable {
    private let state = Locked<(now: Duration, sleeps: [Duration])>((.zero, []))
    func now() -> Duration { state.withLock { $0.now } }
    func advance(_ by: Duration) { state.withLock { $0.now += by } }
    var sleeps: [Duration] { state.withLock { $0.sleeps } }
    var sleeper: ProviderHTTP.Sleeper {
        { delay in
            self.state.withLock {
                $0.now += delay
                $0.sleeps.append(delay)
            }
        }
    }
}

/// A scripted provider: answers each request with the next scripted outcome (the last one repeats).
final class ScriptedTransport: @unchecked Sendable {
    enum Step {
        case answer(Int, headers: [HTTPHeader] = [], body: String = "")
        case fail(HTTPError)
        case take(Duration, then: HTTPError)
    }
    private let state: Locked<(steps: [Step], requests: [HTTPRequest])>
    private let time: FakeTime

    init(_ steps: [Step], time: FakeTime) {
        state = Locked((steps, []))
        self.time = time
    }

    var requests: [HTTPRequest] { state.withLock { $0.requests } }

    var transport: ProviderHTTP.Transport {
        { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in
            let step = self.state.withLock { state -> Step in
                state.requests.append(request)
                return state.steps.count > 1 ? state.steps.removeFirst() : state.steps[0]
            }
            switch step {
            case .answer(let status, let headers, let body):
                return HTTPResponse(status: status, headers: headers, body: Array(body.utf8))
            case .fail(let error):
                throw error
            case .take(let duration, let error):
                // A provider that does not answer: the request's own timeout, at most, passes.
                // `.timedOut(.zero)` stands for "the request's timeout".
                self.time.advance(min(duration, request.timeout))
                throw error == .timedOut(.zero) ? .timedOut(request.timeout) : error
            }
        }
    }
}

@Suite struct ProviderHTTPTests {
    let time = FakeTime()
    let refused = HTTPError.couldNotConnect("POST http://127.0.0.1:9/token: Connection refused")

    private func sender(_ transport: ScriptedTransport, policy: RetryPolicy = .standard, unit: Double = 1)
        -> ProviderHTTP
    {
        ProviderHTTP(transport: transport.transport, policy: policy, clock: time, sleep: time.sleeper, random: { unit })
    }

    private func send(_ sender: ProviderHTTP, _ replay: Replay = .oneTime) async -> Result<HTTPResponse, IdentityError>
    {
        await sender.withBudget { () async -> Result<HTTPResponse, IdentityError> in
            do throws(IdentityError) {
                return .success(
                    try await sender.send(
                        .postForm("http://127.0.0.1:9/token", fields: [("grant_type", "refresh_token")]),
                        what: "the token refresh", replay: replay))
            } catch {
                return .failure(error)
            }
        }
    }

    private func message(_ result: Result<HTTPResponse, IdentityError>) -> String {
        if case .failure(let error) = result { return error.description }
        return "(no error)"
    }

    @Test func aProviderThatIsDownIsTriedThreeTimesWithBackoff() async {
        let transport = ScriptedTransport([.fail(refused)], time: time)
        let result = await send(sender(transport))
        #expect(transport.requests.count == 3)
        #expect(time.sleeps == [.milliseconds(500), .seconds(1)])
        guard case .failure(.unavailable(let text)) = result else {
            Issue.record("\(result)")
            return
        }
        #expect(
            text
                == "the identity provider at 127.0.0.1:9 could not be reached for the token refresh (no connection "
                + "could be made, "
                + "3 tries); check the network and try again later", "\(text)")
        #expect(text.hasSuffix("try again later"))
        #expect(
            IdentityError.unavailable(text).brokerFailure(during: .refresh, host: "127.0.0.1:9").code
                == .serverUnavailable)
    }

    @Test func aTransient503IsRecoveredAndRetryAfterIsWaitedFor() async {
        let transport = ScriptedTransport(
            [.answer(503, headers: [HTTPHeader("retry-after", "2")]), .answer(200, body: "{}")], time: time)
        let result = await send(sender(transport, unit: 0))
        #expect(transport.requests.count == 2)
        #expect(time.sleeps == [.seconds(2)])
        if case .success(let response) = result { #expect(response.status == 200) } else { Issue.record("\(result)") }
    }

    @Test func aRetryAfterBeyondTheCapEndsTheCallAtOnceAndSaysHowLong() async {
        let transport = ScriptedTransport([.answer(503, headers: [HTTPHeader("retry-after", "120")])], time: time)
        let result = await send(sender(transport))
        #expect(transport.requests.count == 1)
        #expect(time.sleeps.isEmpty)
        #expect(
            message(result).contains("answered the token refresh with HTTP 503 and asks to wait 120 s"),
            "\(message(result))")
    }

    @Test func aOneTimeRequestAnswered500IsNotSentAgain() async {
        let body = #"{"error":"server_error","error_description":"AADSTS90000: boom\nTrace ID: x"}"#
        let transport = ScriptedTransport([.answer(500, body: body)], time: time)
        let result = await send(sender(transport))
        #expect(transport.requests.count == 1)
        guard case .failure(.serverFailure(let text)) = result else {
            Issue.record("\(result)")
            return
        }
        #expect(text.contains("answered the token refresh with HTTP 500 (server_error: AADSTS90000: boom)"), "\(text)")
        #expect(text.contains("it was not sent again, as the provider may have used it"))
        #expect(!text.contains("Trace ID"))
    }

    @Test func anIdempotentRequestAnswered500IsRetriedThenReportedAsAServerError() async {
        let transport = ScriptedTransport([.answer(500)], time: time)
        let result = await send(sender(transport), .idempotent)
        #expect(transport.requests.count == 3)
        guard case .failure(.serverFailure(let text)) = result else {
            Issue.record("\(result)")
            return
        }
        #expect(text.contains("HTTP 500 (3 tries): it failed"), "\(text)")
        #expect(IdentityError.serverFailure(text).brokerFailure(during: .other).code == .serverError)
    }

    @Test func aConnectionBrokenAfterSendingIsNotRepeatedForAOneTimeRequest() async {
        let transport = ScriptedTransport([.fail(.transport(code: 52, message: "Empty reply from server"))], time: time)
        let result = await send(sender(transport))
        #expect(transport.requests.count == 1)
        #expect(
            message(result).contains("it was not sent again, as the provider may have used it"), "\(message(result))")
    }

    @Test func aSlowProviderIsReportedWithItsTimeoutAndNotRetried() async {
        let transport = ScriptedTransport([.take(.seconds(60), then: .timedOut(.seconds(15)))], time: time)
        let result = await send(sender(transport), .idempotent)
        #expect(transport.requests.count == 1)
        #expect(time.now() == .seconds(15))
        #expect(
            message(result)
                == "the identity provider at 127.0.0.1:9 did not answer the token refresh within 15 s; try again later")
    }

    @Test func whichTimeoutFiredIsToldFromTheTimeTheAttemptTook() async {
        // A connect timeout: 5 s passed, and the client says 5 s.
        let connect = ScriptedTransport([.take(.seconds(5), then: .timedOut(.seconds(5)))], time: time)
        #expect(
            message(await send(sender(connect), .idempotent))
                == "the identity provider at 127.0.0.1:9 could not be connected to within 5 s for the token refresh; "
                + "check the network and try again later"
        )
        // 15 s passed on a reused connection, and the client says 5 s (it saw no connect): the total timeout.
        let reused = ScriptedTransport([.take(.seconds(15), then: .timedOut(.seconds(5)))], time: time)
        #expect(
            message(await send(sender(reused), .idempotent))
                == "the identity provider at 127.0.0.1:9 did not answer the token refresh within 15 s; try again later")
    }

    @Test func anOversizedAnswerIsABadResponse() async {
        let transport = ScriptedTransport([.fail(.responseTooLarge(limit: 1 << 20))], time: time)
        let result = await send(sender(transport), .idempotent)
        guard case .failure(.badResponse(let why)) = result else {
            Issue.record("\(result)")
            return
        }
        #expect(why == "the answer to the token refresh is larger than 1 MiB; the broker refused it")
    }

    @Test func requestsGetNoMoreTimeThanIsLeftOfTheBudget() async {
        // Three slow requests inside one call: 15 s, then 15 s cut to what is left, then nothing.
        let transport = ScriptedTransport([.take(.seconds(60), then: .timedOut(.zero))], time: time)
        let sender = sender(transport)
        let results = await sender.withBudget { () async -> [String] in
            var messages: [String] = []
            for _ in 0..<3 {
                time.advance(.seconds(7))  // other work of the same call
                do throws(IdentityError) {
                    _ = try await sender.send(
                        .get("http://127.0.0.1:9/keys"), what: "the signing keys (JWKS)", replay: .idempotent)
                } catch {
                    messages.append(error.description)
                }
            }
            return messages
        }
        // 7 + 15 + 7 = 29 s: one second of the 30 s budget was left for the second request, none for the third.
        #expect(transport.requests.map(\.timeout) == [.seconds(15), .seconds(1)])
        #expect(results.count == 3)
        #expect(time.now() == .seconds(7 + 15 + 7 + 1 + 7))
        #expect(
            results[1].contains(
                "did not answer the signing keys (JWKS) within 1 s, the rest of the broker's 30 s limit for one call"),
            "\(results[1])")
        #expect(
            results[2].contains("did not finish the signing keys (JWKS) within the broker's 30 s limit for one call"),
            "\(results[2])")
    }

    @Test func connectTimeoutNeverExceedsTheRequestTimeout() async {
        let transport = ScriptedTransport([.answer(200)], time: time)
        let sender = sender(transport)
        _ = await sender.withBudget { () async -> Bool in
            time.advance(.milliseconds(27_500))
            _ = try? await sender.send(.get("http://127.0.0.1:9/x"), what: "x", replay: .idempotent)
            return true
        }
        #expect(transport.requests.first?.timeout == .milliseconds(2500))
        #expect(transport.requests.first?.connectTimeout == .milliseconds(2500))
    }

    @Test func nestedBudgetsKeepTheEarlierDeadline() async {
        let sender = sender(ScriptedTransport([.answer(200)], time: time))
        await sender.withBudget { () async in
            time.advance(.seconds(20))
            await sender.withBudget { () async in
                #expect(sender.remaining == .seconds(10))
            }
        }
        #expect(sender.remaining == .seconds(30), "outside a call, the whole budget")
    }

    @Test func cancellingTheCallerDuringTheBackoffEndsTheCall() async {
        let transport = ScriptedTransport([.fail(refused)], time: time)
        let sender = ProviderHTTP(
            transport: transport.transport, policy: .standard, clock: time,
            sleep: { _ in throw CancellationError() }, random: { 0 })
        let result = await send(sender)
        #expect(transport.requests.count == 1)
        guard case .failure(.cancelled) = result else {
            Issue.record("\(result)")
            return
        }
        #expect(IdentityError.cancelled.brokerFailure(during: .refresh).code == .cancelled)
    }
}
