import BrokerAPI
import BrokerCore
import DBus
import Locking
import Logging

/// The gate every call to the exported object passes: it counts the calls in flight, per caller
/// and in all, so that a caller that floods the broker gets `LimitsExceeded` instead of growing
/// its memory (interactive sign-ins hold their call for minutes, so the per-caller figure leaves
/// room for them); and it closes for a stop that answers every caller instead of leaving it to a
/// NoReply: once ``stop(grace:hurry:endSignIns:logger:)`` begins, new calls are refused with `Cancelled`; those in
/// flight may finish within the grace period, except
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
        /// Nil only when the call did not come through a connection (a direct call in a test).
        var control: DBusCallControl?
    }

    private struct State {
        var stopping = false
        /// Calls in flight by caller (unique bus name).
        var bySender: [String: Int] = [:]
        var cancelling = false
        var nextId: UInt64 = 0
        var calls: [UInt64: Call] = [:]
        var idleWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    /// Calls that wait for a person rather than for a provider, as the contract marks them, on
    /// every interface the object exports: not worth a grace period.
    private let waitingForPeople: Set<Member>

    private struct Member: Hashable {
        var interface: String
        var name: String
    }

    private static let stopping = BusMarshalling.error(
        BrokerFailure(
            .cancelled,
            "brokerd is stopping; call again (the bus or the service manager starts a new one)"))

    /// How many calls may be in flight at once, from one caller and in all.
    let perCaller: Int
    let total: Int

    /// 256 per caller: an app's calls in its first instant all wait for the one lookup of its
    /// credentials, so a pipelining client legitimately has a few hundred in flight.
    init(_ object: any DBusObject, perCaller: Int = 256, total: Int = 4096) {
        self.object = object
        self.perCaller = perCaller
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
        let admitted: Result<UInt64, any Error> = state.withLock { state in
            guard !state.stopping else { return .failure(Self.stopping) }
            let mine = state.bySender[call.sender, default: 0]
            if mine >= perCaller {
                return .failure(
                    BusMarshalling.error(
                        BrokerFailure(
                            .limitsExceeded,
                            "this caller already has \(perCaller) calls in flight; wait for some to finish")))
            }
            if state.calls.count >= total {
                return .failure(
                    BusMarshalling.error(
                        BrokerFailure(
                            .limitsExceeded,
                            "the broker already has \(total) calls in flight; try again shortly")))
            }
            state.nextId &+= 1
            state.calls[state.nextId] = Call(member: member, sender: call.sender, control: control)
            state.bySender[call.sender] = mine + 1
            return .success(state.nextId)
        }
        let id = try admitted.get()
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

    private func finished(_ id: UInt64) {
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { state in
            if let sender = state.calls.removeValue(forKey: id)?.sender {
                let left = state.bySender[sender, default: 1] - 1
                state.bySender[sender] = left > 0 ? left : nil
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
