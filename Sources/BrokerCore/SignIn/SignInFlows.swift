/// The sign-ins in progress: email-code flows waiting for their code, interactive flows waiting
/// for the browser, device-code and phone-approval flows polling the provider. Each belongs to the caller (bus
/// connection) that started it; only that caller may use it, and it goes when that caller leaves
/// the bus. Flow ids are the caller's own: one caller's ids say nothing about another's flows.
///
/// Bounded per caller, per process, per program and in total, so that no caller can make the
/// broker grow, and one app can take only its own share of the device's sign-ins. An app is a
/// program to the broker: one app may open many connections and start many processes (a share per
/// process alone is multiplied by them), and the bus tells the executable of each; all instances
/// of a program, and all scripts of one interpreter, share its share, which is large enough for
/// any person's sign-ins. Processes whose program cannot be read share one share between them.
/// A program that copies itself under other names gets a share per copy: the total bounds that.
public struct SignInFlows: Sendable {
    /// At most this many flows per caller, per process, per program, and in all.
    public static let maxPerOwner = 8
    public static let maxPerProcess = 16
    public static let maxPerProgram = 32
    public static let maxTotal = 256

    /// A flow's id within its caller's.
    struct Key: Hashable, Sendable {
        var owner: String
        var id: String
    }

    /// At most this many approval requests to one person's phone in ``phoneRequestWindow``
    /// seconds, whichever app asks: a phone flooded with requests until its owner approves one
    /// to make them stop is the attack approval on a phone invites.
    public static let phoneRequestsPerWindow = 3
    public static let phoneRequestWindow: Int64 = 300

    private(set) var flows: [Key: any PendingSignIn] = [:]
    /// When each person's phone (by lowercased username) was last asked, within the window.
    private var phoneRequests: [String: [Int64]] = [:]
    /// Who is behind each caller with flows, as far as the bus told it.
    private var groups: [String: CallerGroups] = [:]

    var count: Int { flows.count }

    private var owners: [String] { flows.keys.map(\.owner) }

    /// Refuses a new flow for `owner` (of the process and program `group` names, when known)
    /// beyond the limits; first forgets code flows older than their lifetime.
    mutating func admit(owner: String, group: CallerGroups, now: Int64) throws(BrokerFailure) {
        flows = flows.filter { _, flow in flow.expiresAt.map { now < $0 } ?? true }
        let all = owners
        let mine = all.filter { $0 == owner }.count
        if mine >= Self.maxPerOwner {
            throw BrokerFailure(
                .limitsExceeded, "this caller has \(mine) sign-ins in progress; finish or cancel one first")
        }
        if let process = group.process {
            let theirs = all.filter { groups[$0]?.process == process }.count
            if theirs >= Self.maxPerProcess {
                throw BrokerFailure(
                    .limitsExceeded,
                    "this process has \(theirs) sign-ins in progress over its connections; finish or cancel one first")
            }
        }
        if let program = group.program {
            let theirs = all.filter { groups[$0]?.program == program }.count
            if theirs >= Self.maxPerProgram {
                throw BrokerFailure(
                    .limitsExceeded,
                    "this program has \(theirs) sign-ins in progress over its processes and connections; finish "
                        + "or cancel one first")
            }
        }
        if group != CallerGroups() { groups[owner] = group }
        if all.count >= Self.maxTotal {
            throw BrokerFailure(.limitsExceeded, "the broker has \(all.count) sign-ins in progress; try again later")
        }
    }

    /// Counts an approval request to `username`'s phone, or refuses it beyond
    /// ``phoneRequestsPerWindow`` in ``phoneRequestWindow``, saying when the phone may be asked again.
    mutating func admitPhoneRequest(to username: String, now: Int64) throws(BrokerFailure) {
        let since = now - Self.phoneRequestWindow
        phoneRequests = phoneRequests.compactMapValues { times in
            let recent = times.filter { $0 > since }
            return recent.isEmpty ? nil : recent
        }
        let key = username.lowercased()
        let recent = phoneRequests[key, default: []]
        if recent.count >= Self.phoneRequestsPerWindow, let oldest = recent.min() {
            let wait = max(1, oldest + Self.phoneRequestWindow - now)
            throw BrokerFailure(
                .limitsExceeded,
                "\(username)'s phone was asked to approve \(recent.count) sign-ins in the last "
                    + "\(Self.phoneRequestWindow / 60) minutes; it is asked again in \(wait) s, or sign in another way")
        }
        phoneRequests[key] = recent + [now]
    }

    /// Refuses a flow id the caller already uses, for any kind: checked before a flow starts
    /// anything (a browser page, polling) that a refusal would leave running.
    func checkFree(_ id: String, owner: String) throws(BrokerFailure) {
        guard flows[Key(owner: owner, id: id)] == nil else {
            throw BrokerFailure(.invalidArgument, "a sign-in with flowId \(id) is already in progress")
        }
    }

    /// Adds a flow; a flow id the caller already uses, for any kind, is refused.
    mutating func add(_ flow: any PendingSignIn, id: String, owner: String) throws(BrokerFailure) {
        try checkFree(id, owner: owner)
        flows[Key(owner: owner, id: id)] = flow
    }

    /// The flow `id` of `owner`, of the kind its caller expects; `.flowNotFound` when that caller
    /// has none of that kind.
    func flow<Flow: PendingSignIn>(_ id: String, owner: String, as kind: Flow.Type) throws(BrokerFailure) -> Flow {
        guard let flow = flows[Key(owner: owner, id: id)] as? Flow else {
            throw BrokerFailure(
                .flowNotFound, "there is no \(Flow.flow.inWords) \(id) of this caller; start a new one")
        }
        return flow
    }

    /// The polled flow (a device code, an approval on a phone) `id` of `owner`; `.flowNotFound`
    /// when that caller has none.
    func polledFlow(_ id: String, owner: String) throws(BrokerFailure) -> any PolledPendingSignIn {
        guard let flow = flows[Key(owner: owner, id: id)] as? any PolledPendingSignIn else {
            let kinds = SignInFlow.allCases.filter(\.isPolled).map(\.inWords).joined(separator: " or ")
            throw BrokerFailure(.flowNotFound, "there is no \(kinds) \(id) of this caller; start a new one")
        }
        return flow
    }

    /// Changes what is kept of a flow still in progress (a code flow's new continuation).
    mutating func update<Flow: PendingSignIn>(_ id: String, owner: String, _ change: (inout Flow) -> Void) {
        let key = Key(owner: owner, id: id)
        guard var flow = flows[key] as? Flow else { return }
        change(&flow)
        flows[key] = flow
    }

    /// Forgets the flow `id` of `owner` once it ended (its own work is over: nothing is stopped).
    mutating func remove(_ id: String, owner: String) { flows[Key(owner: owner, id: id)] = nil }

    /// Ends the flow `id` of `owner`, whichever kind it is.
    mutating func cancel(_ id: String, owner: String) throws(BrokerFailure) {
        guard let flow = flows.removeValue(forKey: Key(owner: owner, id: id)) else {
            throw BrokerFailure(.flowNotFound, "there is no sign-in \(id) of this caller; start a new one")
        }
        flow.stop()
    }

    /// Ends every flow of a caller that left the bus (its polling with it); returns how many.
    mutating func dropAll(owner: String) -> Int {
        groups[owner] = nil
        let theirs = flows.filter { $0.key.owner == owner }
        for (key, flow) in theirs {
            flows[key] = nil
            flow.stop()
        }
        return theirs.count
    }
}

/// A sign-in that outlives the call that started it (a code waiting to be typed, a browser page,
/// a device code being polled): what ``SignInFlows`` keeps of it. One table for every kind, so
/// that a flow id is unique across kinds and every rule (limits, cancelling, a caller leaving)
/// covers a kind added later without a change here.
protocol PendingSignIn: Sendable {
    /// The flow it belongs to, for messages.
    static var flow: SignInFlow { get }
    /// Unix seconds after which it is forgotten unfinished; nil when what runs for it ends it.
    var expiresAt: Int64? { get }
    /// Stops what runs for it (the browser wait, the polling).
    func stop()
}
