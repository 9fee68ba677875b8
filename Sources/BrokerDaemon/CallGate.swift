import BrokerAPI
import BrokerCore
import DBus
import Locking
import Logging

/// The gate every call to the exported object passes: it counts the calls in flight, per caller,
/// per program and in all, so that a caller that floods the broker gets `LimitsExceeded` instead
/// of growing its memory, and one app that floods it (over many connections and processes) uses
/// up only its own program's share of the total, not every other app's calls (interactive
/// sign-ins hold their call for minutes, so the per-caller figure leaves room for them). The
/// calls an app needs to end its own session or read the state, `SignOut` and the cheap reads
/// (``neverRefusedForLoad``), are never refused for the load of others: they have bounds of their
/// own (the same figures, per caller, per program and in all), apart from every other call's, so
/// a flood of other calls never refuses them and one app's flood of them fills only its own
/// share. And it closes for a stop that
/// answers every caller instead of leaving it to a NoReply: once
/// ``stop(grace:hurry:endSignIns:logger:)`` begins, new calls are refused with `Cancelled`; those
/// in flight may finish within the grace period, except
/// interactive sign-ins, which wait for a person and are ended at once; what is still running
/// then is cancelled, and a call that does not end within a second of that is answered with
/// `Cancelled` anyway.
///
/// Each call runs in the task the connection started for it; the connection's
/// ``DBusCallControl`` for that task is how a stop cancels it or answers it early.
final class CallGate: DBusObject {
    private let object: any DBusObject
    private let state = Locked(State())

    private struct Call {
        var member: Member
        var sender: String
        /// The share it counts against: the caller's program (its connection when unknown).
        var share: String
        /// Whether it counts in ``State/unrefused`` rather than ``State/general``.
        var unrefused: Bool
        /// Nil only when the call did not come through a connection (a direct call in a test).
        var control: DBusCallControl?
    }

    /// One set of bounds: per caller, per program, in all.
    private struct Pool {
        /// Calls in flight by caller (unique bus name), admitted or waiting to learn its program.
        var bySender: [String: Int] = [:]
        /// Calls in flight by share (the caller's program; its connection when unknown).
        var byShare: [String: Int] = [:]
        /// Calls in flight admitted past the program's bound, which the total bounds.
        var counted = 0

        /// Gives back a caller's place in its own count.
        mutating func release(sender: String) {
            let left = bySender[sender, default: 1] - 1
            bySender[sender] = left > 0 ? left : nil
        }

        mutating func release(share: String) {
            let left = byShare[share, default: 1] - 1
            byShare[share] = left > 0 ? left : nil
            counted -= 1
        }
    }

    private struct State {
        var stopping = false
        /// Every call but those never refused for load.
        var general = Pool()
        /// The calls never refused for another app's load, bounded apart (the same figures), so
        /// that no flood of other calls refuses them, and one app's flood of them fills only its
        /// own share of theirs.
        var unrefused = Pool()
        var cancelling = false
        var nextId: UInt64 = 0
        var calls: [UInt64: Call] = [:]
        var idleWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]

        /// Adds an admitted call; returns its id.
        mutating func register(_ call: Call) -> UInt64 {
            nextId &+= 1
            calls[nextId] = call
            return nextId
        }
    }

    /// Calls that wait for a person rather than for a provider, as the contract marks them, on
    /// every interface the object exports: not worth a grace period.
    private let waitingForPeople: Set<Member>
    /// Methods of the object's interfaces never refused for the broker's load: what an app needs
    /// to end its session and to read where it stands, whoever else floods the broker. They are
    /// quick (no person, at most one bounded provider call), so a count per connection bounds
    /// them; the bus daemon bounds the connections of a user.
    private let neverRefusedForLoad: Set<String>
    /// The caller's process and program, once the bus has told them (the first call waits).
    private let groups: @Sendable (String) async -> CallerGroups

    private struct Member: Hashable {
        var interface: String
        var name: String
    }

    private static let stopping = BusMarshalling.error(
        BrokerFailure(
            .cancelled,
            "brokerd is stopping; call again (the bus or the service manager starts a new one)"))

    /// How many calls may be in flight at once, from one caller, from one program and in all.
    let perCaller: Int
    let perProgram: Int
    let total: Int

    /// 256 per caller: an app's calls in its first instant all wait for the one lookup of its
    /// credentials, so a pipelining client legitimately has a few hundred in flight. 1024 per
    /// program: a quarter of the total, so that it takes four programs flooding at once, not one
    /// program opening sixteen connections, to fill it.
    init(
        _ object: any DBusObject, neverRefusedForLoad: Set<String> = [],
        groups: @escaping @Sendable (String) async -> CallerGroups = { _ in CallerGroups() },
        perCaller: Int = 256, perProgram: Int = 1024, total: Int = 4096
    ) {
        self.object = object
        self.neverRefusedForLoad = neverRefusedForLoad
        self.groups = groups
        self.perCaller = perCaller
        self.perProgram = perProgram
        self.total = total
        waitingForPeople = Set(
            object.interfaces.flatMap { interface in
                interface.methods.filter { $0.isAnnotated(ContractAnnotation.waitsForPerson) }
                    .map { Member(interface: interface.name, name: $0.name) }
            })
    }

    var interfaces: [DBusInterfaceDescription] { object.interfaces }

    func propertyValues(interface: String) -> [String: DBusValue] { object.propertyValues(interface: interface) }

    func setProperty(interface: String, name: String, value: DBusValue) async throws {
        try await object.setProperty(interface: interface, name: name, value: value)
    }

    /// Answers at once never count as in flight: they end before the next call is read.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? {
        if state.withLock({ $0.stopping }) { return .error(Self.stopping) }
        return object.answerImmediately(call)
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        let control = DBusCallControl.current
        let member = Member(interface: call.interface, name: call.member)
        let id = try await admit(call, member: member, control: control)
        // Done once the reply is on its way, not when the handler returns: a stop that waits for
        // the calls in flight must not let brokerd leave the bus before the last reply is queued.
        if let control {
            control.whenAnswered { [self] in finished(id) }
        }
        defer { if control == nil { finished(id) } }
        let cancelNow = state.withLock { state in
            state.cancelling || (state.stopping && waitingForPeople.contains(member))
        }
        if cancelNow { control?.cancel() }
        return try await object.handleMethodCall(call)
    }

    /// Admits a call within the limits, or throws the refusal. The caller's own count comes
    /// first, before the wait for its program, so that the calls waiting there are bounded too.
    private func admit(_ call: DBusMethodCall, member: Member, control: DBusCallControl?) async throws -> UInt64 {
        let sender = call.sender
        let unrefused = neverRefusedForLoad.contains(call.member)
        let pool: WritableKeyPath<State, Pool> = unrefused ? \.unrefused : \.general
        let kind = unrefused ? "\(call.member) calls" : "calls"
        try state.withLock { state throws in
            guard !state.stopping else { throw Self.stopping }
            let mine = state[keyPath: pool].bySender[sender, default: 0]
            if mine >= perCaller {
                throw Self.refusal("this caller already has \(perCaller) \(kind) in flight; wait for some to finish")
            }
            state[keyPath: pool].bySender[sender] = mine + 1
        }
        let share = await groups(sender).program ?? "connection \(sender)"
        return try state.withLock { state throws -> UInt64 in
            do {
                guard !state.stopping else { throw Self.stopping }
                let theirs = state[keyPath: pool].byShare[share, default: 0]
                if theirs >= perProgram {
                    throw Self.refusal(
                        "this program already has \(perProgram) \(kind) in flight over its connections; wait for "
                            + "some to finish")
                }
                if state[keyPath: pool].counted >= total {
                    throw Self.refusal("the broker already has \(total) \(kind) in flight; try again shortly")
                }
            } catch {
                state[keyPath: pool].release(sender: sender)
                throw error
            }
            state[keyPath: pool].byShare[share, default: 0] += 1
            state[keyPath: pool].counted += 1
            return state.register(
                Call(member: member, sender: sender, share: share, unrefused: unrefused, control: control))
        }
    }

    private static func refusal(_ message: String) -> DBusError {
        BusMarshalling.error(BrokerFailure(.limitsExceeded, message))
    }

    private func finished(_ id: UInt64) {
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { state in
            if let call = state.calls.removeValue(forKey: id) {
                let pool: WritableKeyPath<State, Pool> = call.unrefused ? \.unrefused : \.general
                state[keyPath: pool].release(sender: call.sender)
                state[keyPath: pool].release(share: call.share)
            }
            guard state.calls.isEmpty else { return [] }
            defer { state.idleWaiters = [:] }
            return Array(state.idleWaiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Refuses new calls and returns once every call in flight is answered (see the type).
    /// `hurry` returning (a second SIGTERM or SIGINT) ends the grace period early. `endSignIns`
    /// ends the sign-ins a caller waits on in the browser (they run apart from its call's task).
    func stop(
        grace: Duration, hurry: @escaping @Sendable () async -> Void,
        endSignIns: (String) async -> Void, logger: Logger
    ) async {
        let (running, interactive): (Int, [Call]) = state.withLock { state in
            state.stopping = true
            return (state.calls.count, state.calls.values.filter { waitingForPeople.contains($0.member) })
        }
        guard running > 0 else { return }
        logger.info("waiting for the calls in flight", metadata: ["calls": "\(running)", "grace": "\(grace)"])
        for call in interactive {
            call.control?.cancel()
            await endSignIns(call.sender)
        }
        if await idle(within: grace, hurry: hurry) { return }

        let left: [DBusCallControl] = state.withLock { state in
            state.cancelling = true
            return state.calls.values.compactMap(\.control)
        }
        logger.notice("cancelling the calls still in flight", metadata: ["calls": "\(left.count)"])
        for control in left { control.cancel() }
        if await idle(within: .seconds(1), hurry: nil) { return }

        let stuck: [DBusCallControl] = state.withLock { state in state.calls.values.compactMap(\.control) }
        logger.warning("answering the calls that ignored cancellation", metadata: ["calls": "\(stuck.count)"])
        for control in stuck { control.answer(Self.stopping) }
        _ = await idle(within: .seconds(1), hurry: nil)
    }

    /// Whether every call ended within `limit` (false when `hurry` returned first).
    private func idle(within limit: Duration, hurry: (@Sendable () async -> Void)?) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await self.untilIdle()
                return !Task.isCancelled
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return false
            }
            if let hurry {
                group.addTask {
                    await hurry()
                    return false
                }
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    private func untilIdle() async {
        let id: UInt64 = state.withLock { state in
            state.nextId &+= 1
            return state.nextId
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    if state.calls.isEmpty || Task.isCancelled { return true }
                    state.idleWaiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.idleWaiters.removeValue(forKey: id) }?.resume()
        }
    }
}
