import BrokerCore
import Identity
import Logging

/// The provider ends a session (OpenID Shared Signals, RFC 8936 poll delivery): brokerd polls
/// the transmitter, hands each verified event to the core (which signs the device out when it is
/// about the device's account, cause `provider`) and acknowledges it in the next poll. Whatever
/// fails (the transmitter down, a stream it deleted or disabled, a SET that does not verify) is
/// logged and shown in the device information, and tried again with back-off; it never signs
/// anyone out and never stops brokerd.
enum SharedSignalsListener {
    /// Longest wait between tries while the transmitter fails: short enough that a revocation
    /// made during an outage reaches the device within a minute of the transmitter's return.
    static let maximumBackoff: Duration = .seconds(60)
    /// How many `jti`s are remembered, so a SET delivered again is never acted on twice.
    static let rememberedIds = 4096

    static func start(
        _ receiver: SharedSignalsReceiver, every pollSeconds: Int, broker: Broker, logger: Logger
    ) -> Task<Void, Never> {
        Task {
            var processed = RecentIds(capacity: rememberedIds)
            var ack: [String] = []
            var errors: [String: SecurityEventRejection] = [:]
            var backoff: Duration = .seconds(1)
            var polls = 0
            let interval = Duration.seconds(pollSeconds)
            let transmitter = receiver.settings.transmitter.url
            while !Task.isCancelled {
                let poll: SharedSignalsPoll
                do throws(SharedSignalsError) {
                    poll = try await receiver.poll(ack: ack, errors: errors)
                } catch {
                    if Task.isCancelled { return }
                    // What was processed stays acknowledged-to-be: sent with the next poll that
                    // gets through (a stream made again has none of them, which is harmless).
                    logger.warning(
                        "Shared Signals: the transmitter cannot be polled; trying again",
                        metadata: ["why": "\(error)", "in": "\(backoff.components.seconds) s"])
                    broker.setDeviceFact(
                        DeviceFact.sharedSignals,
                        to: "\(transmitter): \(error); trying again in \(backoff.components.seconds) s")
                    if case .streamGone = error {
                        ack = []
                        errors = [:]
                    }
                    do { try await Task.sleep(for: backoff) } catch { return }
                    backoff = min(backoff * 2, maximumBackoff)
                    continue
                }
                ack = []
                errors = [:]
                backoff = .seconds(1)
                polls += 1
                var later = false
                for (jti, result) in poll.events {
                    switch result {
                    case .failure(let rejection) where rejection.retryable:
                        // Neither acknowledged nor reported: the transmitter delivers it again.
                        logger.warning(
                            "Shared Signals: a security event token cannot be checked now; it comes again",
                            metadata: ["why": "\(rejection.why)"])
                        later = true
                    case .failure(let rejection):
                        logger.warning(
                            "Shared Signals: a security event token was refused; nobody is signed out for it",
                            metadata: ["why": "\(rejection.why)"])
                        errors[jti] = rejection
                    case .success(let event):
                        guard !processed.contains(event.jti) else {
                            ack.append(jti)
                            logger.notice("Shared Signals: a security event delivered again is not acted on twice")
                            continue
                        }
                        if await act(on: event, broker: broker, logger: logger) {
                            processed.insert(event.jti)
                            ack.append(jti)
                        } else {
                            later = true
                        }
                    }
                }
                var fact = "\(transmitter): polling every \(pollSeconds) s"
                if polls % 10 == 1, let status = try? await receiver.status(), status.status != "enabled" {
                    let reason = status.reason.map { " (\($0))" } ?? ""
                    logger.warning(
                        "Shared Signals: the transmitter says the stream is not enabled; events may not arrive",
                        metadata: ["status": "\(status.status)\(reason)"])
                    fact = "\(transmitter): the stream is \(status.status)\(reason); polling every \(pollSeconds) s"
                }
                broker.setDeviceFact(DeviceFact.sharedSignals, to: fact)
                // Acknowledgements go out at once, with whatever else waits; what must come again
                // waits for the next interval rather than loop on a failing check.
                if !later, poll.moreAvailable || !ack.isEmpty || !errors.isEmpty { continue }
                do { try await Task.sleep(for: interval) } catch { return }
            }
        }
    }

    /// Acts on one event; false when it must come again (the change could not be written).
    private static func act(on event: SecurityEvent, broker: Broker, logger: Logger) async -> Bool {
        switch event.kind {
        case .sessionEnd(let end):
            let outcome = await broker.providerEnded(end, for: event.subject, at: event.eventTime, eventId: event.jti)
            logger.info(
                "Shared Signals: event processed",
                metadata: ["event": "\(end.rawValue)", "subject": "\(event.subject)", "outcome": "\(outcome)"])
            if case .notDone = outcome { return false }
        case .stream(let uri):
            logger.info("Shared Signals: stream event", metadata: ["event": "\(uri)"])
        case .other(let uri):
            logger.info("Shared Signals: an event brokerd does not act on", metadata: ["event": "\(uri)"])
        }
        return true
    }
}

/// The provider ends a session and says nothing (no transmitter): every `sessionCheckSeconds`,
/// brokerd asks whether the device's sign-in still holds (``Broker/checkDeviceSession()``). A
/// refusal for good signs the device out (cause `provider`); a provider that cannot answer does not.
enum SessionCheck {
    static func start(every seconds: Int, broker: Broker, logger: Logger) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: .seconds(seconds)) } catch { return }
                let outcome = await broker.checkDeviceSession()
                let fact: String
                switch outcome {
                case .alive: fact = "the sign-in holds (checked every \(seconds) s)"
                case .nothingToCheck: fact = "nobody to check (every \(seconds) s)"
                case .ended: fact = "the provider ended the sign-in; the device was signed out"
                case .unknown(let why):
                    logger.notice(
                        "session check: the provider could not say; the sign-in stays", metadata: ["why": "\(why)"])
                    fact = "the provider could not say (\(why)); checking again in \(seconds) s"
                }
                if outcome != .nothingToCheck { logger.info("session checked", metadata: ["outcome": "\(outcome)"]) }
                broker.setDeviceFact(DeviceFact.sessionCheck, to: fact)
            }
        }
    }
}

/// The last `capacity` ids seen, oldest forgotten first.
struct RecentIds {
    private var seen: Set<String> = []
    private var order: [String] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func contains(_ id: String) -> Bool { seen.contains(id) }

    /// False when `id` was seen already.
    @discardableResult
    mutating func insert(_ id: String) -> Bool {
        guard !seen.contains(id) else { return false }
        if order.count < capacity {
            order.append(id)
        } else {
            seen.remove(order[next])
            order[next] = id
            next = (next + 1) % capacity
        }
        seen.insert(id)
        return true
    }
}
