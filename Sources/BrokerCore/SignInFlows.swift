/// The sign-ins in progress: email-code flows waiting for their code, interactive flows waiting
/// for the browser, device-code flows polling the provider. Each belongs to the caller (bus
/// connection) that started it; only that caller may use it, and it goes when that caller leaves
/// the bus. Flow ids are the caller's own: one caller's ids say nothing about another's flows.
/// Bounded per caller, per process (one program may open many connections) and in total, so
/// that no caller can make the broker grow or take every sign-in of the device.
public struct SignInFlows: Sendable {
    /// At most this many flows per caller, per process, and in all.
    public static let maxPerOwner = 8
    public static let maxPerProcess = 16
    public static let maxTotal = 256
    /// A code flow nobody finishes is forgotten after this long (the provider's code has expired by then).
    public static let codeFlowLifetime: Int64 = 30 * 60

    /// A flow's id within its caller's.
    struct Key: Hashable, Sendable {
        var owner: String
        var id: String
    }

    struct CodeFlow: Sendable {
        var clientId: String
        var username: String
        var scopes: Scopes
        /// The provider's handle on the flow; a secret.
        var continuationToken: String
        var startedAt: Int64
    }

    struct InteractiveFlow: Sendable {
        var cancel: @Sendable () -> Void
    }

    /// A device-code sign-in (RFC 8628): the broker polls the provider while a person signs in
    /// elsewhere; the task ends with the sign-in's tokens.
    struct DeviceFlow: Sendable {
        var task: Task<AppTokens, any Error>
    }

    private(set) var codeFlows: [Key: CodeFlow] = [:]
    private(set) var interactiveFlows: [Key: InteractiveFlow] = [:]
    private(set) var deviceFlows: [Key: DeviceFlow] = [:]
    /// The process behind each caller with flows, where the bus told it.
    private var processes: [String: String] = [:]

    var count: Int { codeFlows.count + interactiveFlows.count + deviceFlows.count }

    private var owners: [String] {
        codeFlows.keys.map(\.owner) + interactiveFlows.keys.map(\.owner) + deviceFlows.keys.map(\.owner)
    }

    /// Refuses a new flow for `owner` (of `process`, when known) beyond the limits; first
    /// forgets code flows older than their lifetime.
    mutating func admit(owner: String, process: String?, now: Int64) throws(BrokerFailure) {
        codeFlows = codeFlows.filter { now - $0.value.startedAt < Self.codeFlowLifetime }
        let all = owners
        let mine = all.filter { $0 == owner }.count
        if mine >= Self.maxPerOwner {
            throw BrokerFailure(
                .limitsExceeded, "this caller has \(mine) sign-ins in progress; finish or cancel one first")
        }
        if let process {
            let theirs = all.filter { processes[$0] == process }.count
            if theirs >= Self.maxPerProcess {
                throw BrokerFailure(
                    .limitsExceeded,
                    "this program has \(theirs) sign-ins in progress over its connections; finish or cancel one first")
            }
            processes[owner] = process
        }
        if all.count >= Self.maxTotal {
            throw BrokerFailure(.limitsExceeded, "the broker has \(all.count) sign-ins in progress; try again later")
        }
    }

    mutating func addCode(_ flow: CodeFlow, id: String, owner: String) {
        codeFlows[Key(owner: owner, id: id)] = flow
    }

    /// The code flow `id` of `owner`; `.flowNotFound` when that caller has none.
    func codeFlow(_ id: String, owner: String) throws(BrokerFailure) -> CodeFlow {
        guard let flow = codeFlows[Key(owner: owner, id: id)] else {
            throw BrokerFailure(.flowNotFound, "there is no sign-in \(id) of this caller; start a new one")
        }
        return flow
    }

    mutating func updateContinuation(_ id: String, owner: String, _ token: String) {
        codeFlows[Key(owner: owner, id: id)]?.continuationToken = token
    }

    mutating func removeCode(_ id: String, owner: String) { codeFlows[Key(owner: owner, id: id)] = nil }

    mutating func addInteractive(_ id: String, owner: String, cancel: @escaping @Sendable () -> Void)
        throws(BrokerFailure)
    {
        let key = Key(owner: owner, id: id)
        if interactiveFlows[key] != nil || codeFlows[key] != nil || deviceFlows[key] != nil {
            throw BrokerFailure(.invalidArgument, "a sign-in with flowId \(id) is already in progress")
        }
        interactiveFlows[key] = InteractiveFlow(cancel: cancel)
    }

    mutating func removeInteractive(_ id: String, owner: String) { interactiveFlows[Key(owner: owner, id: id)] = nil }

    mutating func addDevice(_ flow: DeviceFlow, id: String, owner: String) {
        deviceFlows[Key(owner: owner, id: id)] = flow
    }

    /// The device flow `id` of `owner`; `.flowNotFound` when that caller has none.
    func deviceFlow(_ id: String, owner: String) throws(BrokerFailure) -> DeviceFlow {
        guard let flow = deviceFlows[Key(owner: owner, id: id)] else {
            throw BrokerFailure(.flowNotFound, "there is no device sign-in \(id) of this caller; start a new one")
        }
        return flow
    }

    mutating func removeDevice(_ id: String, owner: String) { deviceFlows[Key(owner: owner, id: id)] = nil }

    /// Ends the flow `id` of `owner`, whichever kind it is.
    mutating func cancel(_ id: String, owner: String) throws(BrokerFailure) {
        let key = Key(owner: owner, id: id)
        if let flow = interactiveFlows.removeValue(forKey: key) {
            flow.cancel()
        } else if let flow = deviceFlows.removeValue(forKey: key) {
            flow.task.cancel()
        } else if codeFlows.removeValue(forKey: key) == nil {
            throw BrokerFailure(.flowNotFound, "there is no sign-in \(id) of this caller; start a new one")
        }
    }

    /// Ends every flow of a caller that left the bus (its polling with it); returns how many.
    mutating func dropAll(owner: String) -> Int {
        processes[owner] = nil
        let code = codeFlows.keys.filter { $0.owner == owner }
        for key in code { codeFlows[key] = nil }
        let interactive = interactiveFlows.filter { $0.key.owner == owner }
        for (key, flow) in interactive {
            interactiveFlows[key] = nil
            flow.cancel()
        }
        let device = deviceFlows.filter { $0.key.owner == owner }
        for (key, flow) in device {
            deviceFlows[key] = nil
            flow.task.cancel()
        }
        return code.count + interactive.count + device.count
    }
}
