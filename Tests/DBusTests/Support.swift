import DBus
import Foundation
import Glibc
import Locking
import TestSupport
import Testing

extension PrivateBus {
    func connect() throws -> DBusConnection { try DBusConnection(address: address) }
}

/// Runs `body` with a fresh private bus, stopped afterwards.
func withBus<R>(_ body: (PrivateBus) async throws -> R) async throws -> R {
    let bus = try await offThePool { try PrivateBus() }
    defer { bus.stop() }
    return try await body(bus)
}

/// Runs a command with a bounded wait and returns (status, stdout).
func runTool(_ path: String, _ arguments: [String], timeout: Duration = .seconds(10)) async throws -> (Int32, String) {
    let result = try await runCommand(path, arguments, timeout: timeout)
    return (result.status, result.stdout)
}

/// A command's result and how long it took to end.
func runTimed(
    _ path: String, _ arguments: [String],
    timeout: Duration = .seconds(15)
) async throws -> (result: CommandResult, elapsed: Duration) {
    let start = ContinuousClock.now
    let result = try await runCommand(path, arguments, timeout: timeout)
    return (result, ContinuousClock.now - start)
}

/// Expects `body` to throw a DBusError named `name`; returns it.
@discardableResult
func expectDBusError(
    _ name: String, _ body: () async throws -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
) async -> DBusError? {
    do {
        try await body()
        Issue.record("expected \(name), got success", sourceLocation: sourceLocation)
    } catch let error as DBusError {
        #expect(error.name == name, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected \(name), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Test object: one echo method per signature, plus failure, slow and property methods.
final class TestObject: DBusObject, @unchecked Sendable {
    static let interfaceName = "org.example.Test"
    let echoSignatures: [String]
    private let lock = Locked(())
    private var count: UInt32 = 7
    private var controls: [String: DBusCallControl] = [:]

    /// The control of the last `Slow` or `Stuck` call that started.
    func control(of member: String) -> DBusCallControl? { lock.withLock { _ in controls[member] } }

    init(echoSignatures: [String] = []) { self.echoSignatures = echoSignatures }

    var interfaces: [DBusInterfaceDescription] {
        var methods = echoSignatures.enumerated().map { index, sig in
            DBusInterfaceDescription.Method(
                name: "Echo\(index)", inArguments: [.init("value", sig)], outArguments: [.init("value", sig)])
        }
        methods += [
            .init(name: "Add", inArguments: [.init("a", "i"), .init("b", "i")], outArguments: [.init("sum", "i")]),
            .init(name: "Fail", inArguments: [.init("name", "s"), .init("message", "s")]),
            .init(name: "FailGeneric"),
            .init(name: "Slow", inArguments: [.init("milliseconds", "u")]),
            .init(name: "WrongReply", outArguments: [.init("value", "s")]),
            .init(name: "AnswerAtOnce", inArguments: [.init("atOnce", "b")], outArguments: [.init("where", "s")]),
            .init(name: "Stuck", inArguments: [.init("milliseconds", "u")], outArguments: [.init("value", "s")]),
            .init(name: "WrongAtOnce", outArguments: [.init("value", "s")]),
            .init(name: "Prepared", outArguments: [.init("greeting", "a{sv}"), .init("count", "u")]),
            .init(name: "WrongPrepared", outArguments: [.init("value", "s")]),
        ]
        return [
            DBusInterfaceDescription(
                name: Self.interfaceName, methods: methods,
                signals: [.init(name: "Ping", arguments: [.init("text", "s")])],
                properties: [
                    .init(name: "Name", signature: "s", access: .read),
                    .init(name: "Count", signature: "u", access: .readwrite, emitsChangedSignal: .true),
                ])
        ]
    }

    struct Generic: Error {}

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        switch call.member {
        case "Add":
            guard let a = call.arguments[0].int32, let b = call.arguments[1].int32 else {
                throw DBusError.invalidArgs("ii")
            }
            return [.int32(a &+ b)]
        case "Fail":
            throw DBusError(name: call.arguments[0].string ?? "", message: call.arguments[1].string ?? "")
        case "FailGeneric":
            throw Generic()
        case "Slow":
            lock.withLock { _ in controls["Slow"] = DBusCallControl.current }
            try await Task.sleep(for: .milliseconds(Int(call.arguments[0].uint32 ?? 0)))
            return []
        case "Stuck":
            // Ignores cancellation: waits on a detached task, which the handler's cancellation does not reach.
            lock.withLock { _ in controls["Stuck"] = DBusCallControl.current }
            let milliseconds = Int(call.arguments[0].uint32 ?? 0)
            await Task.detached { try? await Task.sleep(for: .milliseconds(milliseconds)) }.value
            return [.string("too late")]
        case "WrongReply":
            return [.int32(1)]
        case "AnswerAtOnce":
            return [.string("task")]
        default:
            return call.arguments
        }
    }

    /// `AnswerAtOnce(true)`, `WrongAtOnce`, `Prepared` and `WrongPrepared` are answered on the
    /// connection's thread; `AnswerAtOnce(false)` falls through to `handleMethodCall`, which says "task".
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? {
        switch call.member {
        case "AnswerAtOnce": return call.arguments.first?.bool == true ? .values([.string("at once")]) : nil
        case "WrongAtOnce": return .values([.uint32(1)])
        case "Prepared": return Self.prepared.map { .prepared($0) }
        case "WrongPrepared": return Self.prepared.map { .prepared($0) }
        default: return nil
        }
    }

    /// One reply marshalled once and sent to every caller of `Prepared`.
    static let prepared = try? DBusPreparedReply([
        .vardict(inOrder: ["hello": .string("world"), "n": .int32(7)]), .uint32(42),
    ])

    func propertyValues(interface: String) -> [String: DBusValue] {
        lock.withLock { _ in ["Name": .string("test object"), "Count": .uint32(count)] }
    }

    func setProperty(interface: String, name: String, value: DBusValue) async throws {
        lock.withLock { _ in count = value.uint32 ?? count }
    }
}
