import Foundation

/// The pace a polling client must keep (RFC 8628 §3.5, which CIBA Core 11 follows): a poll
/// sooner than the interval after the last one is `slow_down`, and the interval then grows by
/// 5 s. The first poll is never too soon. Shared by the device code and CIBA's requests.
struct PollPace: Sendable {
    private(set) var interval: TimeInterval
    private var lastPoll: Date?
    /// Polls still to be answered `slow_down` whatever their pace (a test's setting).
    private var forcedSlowDowns: Int

    init(interval: Int, forcedSlowDowns: Int) {
        self.interval = TimeInterval(interval)
        self.forcedSlowDowns = forcedSlowDowns
    }

    /// Records a poll at `now`; true when it is to be answered `slow_down`.
    mutating func slowDown(at now: Date) -> Bool {
        // A quarter second of leeway: a request is stamped when handled, not when sent.
        let early = lastPoll.map { now.timeIntervalSince($0) < interval - 0.25 } ?? false
        lastPoll = now
        guard forcedSlowDowns > 0 || early else { return false }
        forcedSlowDowns = max(0, forcedSlowDowns - 1)
        interval += 5
        return true
    }
}
