/// What the sign-ins a person finishes on another device share (the device code, approval on a
/// phone): the broker polls the provider's token endpoint at the pace it asks until the person
/// has acted there, and `FinishSignIn` waits for the outcome. Each flow's file starts its own.

/// One poll of the token endpoint for such a sign-in (RFC 8628 3.5; CIBA Core 11).
public enum SignInPoll: Sendable {
    /// The person has not acted yet.
    case pending
    /// Too fast: wait 5 seconds longer between polls from now on.
    case slowDown
    case tokens(ProviderTokens)
}

/// A sign-in being polled: the task ends with its tokens, and the polling ends it (at the
/// provider's expiry at the latest).
protocol PolledPendingSignIn: PendingSignIn {
    var task: Task<AppTokens, any Error> { get }
}

extension PolledPendingSignIn {
    var expiresAt: Int64? { nil }
    func stop() { task.cancel() }
}

/// How one polled sign-in is polled: the provider's pace and expiry, and what the person is told
/// when it runs out.
struct PollSchedule: Sendable {
    /// Seconds between polls, as the provider asked (at least one).
    var interval: Int64
    /// Unix seconds after which the provider has forgotten the sign-in.
    var deadline: Int64
    /// The refusal once the deadline has passed.
    var expired: BrokerFailure
}

extension Broker {
    /// Registers a started sign-in of `Flow` as `owner`'s, polling in the background with `poll`
    /// until the person has acted, and returns its flow id. The sign-in ends like the others
    /// (``adoptSignIn``, `AccountChanged`) whether or not anyone waits with ``finishSignIn``.
    func startPolling<Flow: PolledPendingSignIn>(
        _ kind: Flow.Type, make: (Task<AppTokens, any Error>) -> Flow, schedule: PollSchedule, clientId: String,
        scopes: Scopes, correlationId: String, owner: String,
        poll: @escaping @Sendable () async throws -> SignInPoll
    ) async throws(BrokerFailure) -> String {
        try admitFlow(owner: owner)
        let flowId = Self.newCorrelationId()
        let startGeneration = generation
        let task = Task { () async throws -> AppTokens in
            try await self.pollUntilSignedIn(
                Flow.flow, schedule: schedule, clientId: clientId, scopes: scopes, correlationId: correlationId,
                startGeneration: startGeneration, poll: poll)
        }
        do { try flows.add(make(task), id: flowId, owner: owner) } catch {
            task.cancel()
            throw error
        }
        try await endIfCallerLeft(owner)
        logger.info(
            "\(Flow.flow.inWords) started",
            metadata: ["clientId": "\(clientId)", "flowId": "\(flowId)", "correlationId": "\(correlationId)"])
        return flowId
    }

    private func pollUntilSignedIn(
        _ flow: SignInFlow, schedule: PollSchedule, clientId: String, scopes: Scopes, correlationId: String,
        startGeneration: UInt64, poll: @Sendable () async throws -> SignInPoll
    ) async throws(BrokerFailure) -> AppTokens {
        var interval = max(1, schedule.interval)
        // After a provider outage the polls slow down, up to this, until the provider answers again.
        var wait = interval
        while true {
            do {
                try await Task.sleep(for: .seconds(wait))
            } catch {
                throw BrokerFailure(.cancelled, "the \(flow.inWords) was cancelled")
            }
            guard clock.now() < schedule.deadline else { throw schedule.expired }
            let outcome: SignInPoll
            do throws(BrokerFailure) {
                outcome = try await callProvider(correlationId) { try await poll() }
            } catch  where error.code == .serverUnavailable {
                // The person may be acting on their phone right now: an outage of the provider
                // is waited out for the sign-in's lifetime, not turned into a failed sign-in.
                wait = min(max(wait * 2, interval), Self.longestPollWait)
                logger.notice(
                    "the provider is unavailable; the \(flow.inWords) polls again later",
                    metadata: ["correlationId": "\(correlationId)", "seconds": "\(wait)"])
                continue
            }
            wait = interval
            switch outcome {
            case .pending:
                continue
            case .slowDown:
                interval += 5
                wait = interval
            case .tokens(let tokens):
                return try await adoptSignIn(
                    tokens, clientId: clientId, scopes: scopes, correlationId: correlationId,
                    startGeneration: startGeneration)
            }
        }
    }

    /// The longest pause between polls while the provider is unavailable.
    static let longestPollWait: Int64 = 60

    /// Waits for the polled sign-in `flowId` of `owner` (a device code, an approval on a phone)
    /// to end, and returns its tokens.
    public func finishSignIn(flowId: String, owner: String) async throws(BrokerFailure) -> AppTokens {
        try InputRules.flowId(flowId)
        let flow = try flows.polledFlow(flowId, owner: owner)
        let outcome = await flow.task.result
        flows.remove(flowId, owner: owner)
        switch outcome {
        case .success(let tokens):
            return tokens
        case .failure(let failure as BrokerFailure):
            throw failure
        case .failure:
            throw BrokerFailure(.cancelled, "the \(type(of: flow).flow.inWords) was cancelled")
        }
    }
}
