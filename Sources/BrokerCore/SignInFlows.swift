/// The sign-ins in progress: email-code flows waiting for their code, and interactive flows
/// waiting for the browser. Each belongs to the caller (bus connection) that started it; only
/// that caller may use it, and it goes when that caller leaves the bus. Bounded per caller and
/// in total, so no caller can make the broker grow.
public struct SignInFlows: Sendable {
    /// At most this many flows per caller, and in all.
    public static let maxPerOwner = 8
    public static let maxTotal = 256
    /// A code flow nobody finishes is forgotten after this long (the provider's code has expired by then).
    public static let codeFlowLifetime: Int64 = 30 * 60

    struct CodeFlow: Sendable {
        var owner: String
        var clientId: String
        var username: String
        var scopes: Scopes
        /// The provider's handle on the flow; a secret.
        var continuationToken: String
        var startedAt: Int64
    }

    struct InteractiveFlow: Sendable {
        var owner: String
        var cancel: @Sendable () -> Void
    }

    /// A device-code sign-in (RFC 8628): the broker polls the provider while a person signs in
    /// elsewhere; the task ends with the sign-in's tokens.
    struct DeviceFlow: Sendable {
        var owner: String
        var task: Task<AppTokens, any Error>
    }

    private(set) var codeFlows: [String: CodeFlow] = [:]
    private(set) var interactiveFlows: [String: InteractiveFlow] = [:]
    private(set) var deviceFlows: [String: DeviceFlow] = [:]

    var count: Int { codeFlows.count + interactiveFlows.count + deviceFlows.count }

    /// Refuses a new flow for `owner` beyond the limits; first forgets code flows older than their lifetime.
    mutating func admit(owner: String, now: Int64) throws(BrokerFailure) {
        codeFlows = codeFlows.filter { now - $0.value.startedAt < Self.codeFlowLifetime }
        let mine =
            codeFlows.values.filter { $0.owner == owner }.count
            + interactiveFlows.values.filter { $0.owner == owner }.count
            + deviceFlows.values.filter { $0.owner == owner }.count
        if mine >= Self.maxPerOwner {
            throw BrokerFailure(
                .limitsExceeded, "this caller has \(mine) sign-ins in progress; finish or cancel one first")
        }
        if count >= Self.maxTotal {
            throw BrokerFailure(.limitsExceeded, "the broker has \(count) sign-ins in progress; try again later")
        }
    }

    mutating func addCode(_ flow: CodeFlow, id: String) { codeFlows[id] = flow }

    /// The code flow `id` if `owner` started it; others get `.flowNotFound`, as if it did not exist.
    func codeFlow(_ id: String, owner: String) throws(BrokerFailure) -> CodeFlow {
        guard let flow = codeFlows[id], flow.owner == owner else {
            throw BrokerFailure(.flowNotFound, "there is no sign-in \(id) of this caller; start a new one")
        }
        return flow
    }

    mutating func updateContinuation(_ id: String, _ token: String) { codeFlows[id]?.continuationToken = token }
    mutating func removeCode(_ id: String) { codeFlows[id] = nil }

    mutating func addInteractive(_ id: String, owner: String, cancel: @escaping @Sendable () -> Void)
        throws(BrokerFailure)
    {
        if interactiveFlows[id] != nil || codeFlows[id] != nil {
            throw BrokerFailure(.invalidArgument, "a sign-in with flowId \(id) is already in progress")
        }
        interactiveFlows[id] = InteractiveFlow(owner: owner, cancel: cancel)
    }

    mutating func removeInteractive(_ id: String) { interactiveFlows[id] = nil }

    mutating func addDevice(_ flow: DeviceFlow, id: String) { deviceFlows[id] = flow }

    /// The device flow `id` if `owner` started it; others get `.flowNotFound`.
    func deviceFlow(_ id: String, owner: String) throws(BrokerFailure) -> DeviceFlow {
        guard let flow = deviceFlows[id], flow.owner == owner else {
            throw BrokerFailure(.flowNotFound, "there is no device sign-in \(id) of this caller; start a new one")
        }
        return flow
    }

    mutating func removeDevice(_ id: String) { deviceFlows[id] = nil }

    /// Ends the flow `id` of `owner`, whichever kind it is.
    mutating func cancel(_ id: String, owner: String) throws(BrokerFailure) {
        if let flow = interactiveFlows[id], flow.owner == owner {
            interactiveFlows[id] = nil
            flow.cancel()
            return
        }
        if let flow = deviceFlows[id], flow.owner == owner {
            deviceFlows[id] = nil
            flow.task.cancel()
            return
        }
        _ = try codeFlow(id, owner: owner)
        codeFlows[id] = nil
    }

    /// Drops every flow of a caller that left the bus; returns how many.
    mutating func dropAll(owner: String) -> Int {
        let code = codeFlows.filter { $0.value.owner == owner }
        let interactive = interactiveFlows.filter { $0.value.owner == owner }
        for key in code.keys { codeFlows[key] = nil }
        for (id, flow) in interactive {
            interactiveFlows[id] = nil
            flow.cancel()
        }
        let device = deviceFlows.filter { $0.value.owner == owner }
        for (id, flow) in device {
            deviceFlows[id] = nil
            flow.task.cancel()
        }
        return code.count + interactive.count + device.count
    }
}
