import BrokerCore
import DBus
import Locking
import Testing

@testable import BrokerDaemon

/// The gate's counts, without a bus and with small limits: one program's connections share one
/// share, the total still bounds everyone, and the calls never refused for load pass a full gate.
@Suite("Call gate: limits per caller, per program and in all")
struct CallGateTests {
    /// An object whose calls wait until released, and say when they reach it.
    final class WaitingObject: DBusObject {
        let interfaces: [DBusInterfaceDescription] = []
        private let waiting = Locked<[CheckedContinuation<Void, Never>]>([])
        let reached: AsyncStream<String>
        private let reach: AsyncStream<String>.Continuation

        init() { (reached, reach) = AsyncStream.makeStream(of: String.self) }

        func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
            await withCheckedContinuation { continuation in
                waiting.withLock { $0.append(continuation) }
                reach.yield("\(call.sender) \(call.member)")
            }
            return []
        }

        func propertyValues(interface: String) -> [String: DBusValue] { [:] }

        func release() {
            let all = waiting.withLock { waiting in
                defer { waiting = [] }
                return waiting
            }
            for continuation in all { continuation.resume() }
        }
    }

    /// `:1.N` are connections of one program, anything else of another.
    static func gate(_ object: WaitingObject) -> CallGate {
        CallGate(
            object, neverRefusedForLoad: ["SignOut"],
            groups: { sender in
                CallerGroups(process: sender, program: sender.hasPrefix(":1.") ? "/usr/bin/flooder" : "/usr/bin/mail")
            }, perCaller: 2, perProgram: 4, total: 6)
    }

    static func call(_ sender: String, _ member: String = "Wait") -> DBusMethodCall {
        DBusMethodCall(sender: sender, path: "/", interface: "test.Gate", member: member, signature: "", arguments: [])
    }

    /// Starts a call; the task ends with the refusal's message, or "answered".
    static func start(_ gate: CallGate, _ call: DBusMethodCall) -> Task<String, Never> {
        Task {
            do {
                _ = try await gate.handleMethodCall(call)
                return "answered"
            } catch let error as DBusError {
                return error.message
            } catch {
                return "\(error)"
            }
        }
    }

    /// Waits until `count` more calls reached the object, at most 10 s; whether they did.
    static func reached(_ object: WaitingObject, _ count: Int) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                var seen = 0
                for await _ in object.reached {
                    seen += 1
                    if seen == count { return true }
                }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    @Test func oneProgramTakesItsShareAndTheCallsNeverRefusedForLoadStillPass() async {
        let object = WaitingObject()
        let gate = Self.gate(object)
        // Three connections of one program, two calls each: the program's 4 pass.
        let flood = [":1.1", ":1.1", ":1.2", ":1.2", ":1.3", ":1.3"].map { Self.start(gate, Self.call($0)) }
        #expect(await Self.reached(object, 4))
        // Another program is served, up to the total.
        let other = [Self.start(gate, Self.call(":2.1")), Self.start(gate, Self.call(":2.2"))]
        #expect(await Self.reached(object, 2))
        let overTotal = await Self.start(gate, Self.call(":3.1")).value
        #expect(overTotal.contains("the broker already has 6 calls in flight"), "\(overTotal)")
        // The flooding program's own connection, full, and the gate, full: SignOut passes.
        let signOut = Self.start(gate, Self.call(":1.1", "SignOut"))
        #expect(await Self.reached(object, 1))

        object.release()
        var outcomes: [String] = []
        for task in flood { outcomes.append(await task.value) }
        #expect(outcomes.filter { $0 == "answered" }.count == 4)
        #expect(
            outcomes.filter { $0.contains("this program already has 4 calls in flight") }.count == 2, "\(outcomes)")
        for task in other { #expect(await task.value == "answered") }
        #expect(await signOut.value == "answered")

        // Every count came back: the program is served again.
        let again = Self.start(gate, Self.call(":1.3"))
        #expect(await Self.reached(object, 1))
        object.release()
        #expect(await again.value == "answered")
    }

    @Test func aConnectionHasItsOwnBoundForTheCallsNeverRefusedForLoad() async {
        let object = WaitingObject()
        let gate = Self.gate(object)
        let signOuts = (0..<2).map { _ in Self.start(gate, Self.call(":2.1", "SignOut")) }
        #expect(await Self.reached(object, 2))
        let third = await Self.start(gate, Self.call(":2.1", "SignOut")).value
        #expect(third.contains("this caller already has 2 SignOut calls in flight"), "\(third)")
        // Apart from its other calls, which still have their own 2.
        let waits = (0..<2).map { _ in Self.start(gate, Self.call(":2.1")) }
        #expect(await Self.reached(object, 2))
        object.release()
        for task in signOuts + waits { #expect(await task.value == "answered") }
    }

    /// From the attacker's side: one program floods the calls never refused for load over many
    /// connections (the bus allows a user thousands). They are bounded per program like the
    /// others, apart from them: the flood fills its own share, another app's SignOut passes.
    @Test func aFloodOfTheCallsNeverRefusedForLoadFillsOnlyItsProgramsShare() async {
        let object = WaitingObject()
        let gate = Self.gate(object)
        let flood = (1...6).map { Self.start(gate, Self.call(":1.\($0)", "SignOut")) }
        #expect(await Self.reached(object, 4))
        let signOut = Self.start(gate, Self.call(":2.1", "SignOut"))
        #expect(await Self.reached(object, 1))
        object.release()
        var outcomes: [String] = []
        for task in flood { outcomes.append(await task.value) }
        #expect(outcomes.filter { $0 == "answered" }.count == 4, "\(outcomes)")
        #expect(
            outcomes.filter { $0.contains("this program already has 4 SignOut calls in flight") }.count == 2,
            "\(outcomes)")
        #expect(await signOut.value == "answered")
    }
}
