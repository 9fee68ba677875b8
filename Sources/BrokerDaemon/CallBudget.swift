import BrokerCore
import Synchronization

/// How many calls may be in flight at once, per caller and in all: a caller that floods the
/// broker gets `LimitsExceeded` instead of growing its memory. Interactive sign-ins hold their
/// call for minutes, so the per-caller figure leaves room for them and for ordinary queries.
final class CallBudget: Sendable {
    let perCaller: Int
    let total: Int
    private let inFlight = Mutex<(bySender: [String: Int], total: Int)>(([:], 0))

    init(perCaller: Int = 64, total: Int = 4096) {
        self.perCaller = perCaller
        self.total = total
    }

    /// Takes a slot for a call of `sender`, or refuses it.
    func enter(_ sender: String) throws(BrokerFailure) {
        let refusal: BrokerFailure? = inFlight.withLock { state in
            let mine = state.bySender[sender, default: 0]
            if mine >= perCaller {
                return BrokerFailure(.limitsExceeded, "this caller already has \(perCaller) calls in flight; wait for some to finish")
            }
            if state.total >= total {
                return BrokerFailure(.limitsExceeded, "the broker already has \(total) calls in flight; try again shortly")
            }
            state.bySender[sender] = mine + 1
            state.total += 1
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Gives the slot back when the call has been answered.
    func leave(_ sender: String) {
        inFlight.withLock { state in
            let mine = state.bySender[sender, default: 0]
            if mine <= 1 { state.bySender[sender] = nil } else { state.bySender[sender] = mine - 1 }
            state.total = max(0, state.total - 1)
        }
    }

    /// Calls in flight now, for tests and diagnostics.
    var current: (callers: Int, calls: Int) {
        inFlight.withLock { ($0.bySender.count, $0.total) }
    }
}
