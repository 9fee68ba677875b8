import DBus
import Foundation
import Glibc
import Testing

/// A private `dbus-daemon --session` for one test; never the developer's bus.
final class TestBus: @unchecked Sendable {
    let process: Process
    let address: String

    init() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--session", "--nofork", "--nopidfile", "--print-address=1"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        // Bounded wait for the address line.
        let fd = out.fileHandleForReading.fileDescriptor
        var data = [UInt8]()
        let deadline = Date().addingTimeInterval(10)
        while !data.contains(UInt8(ascii: "\n")) {
            let remaining = Int32(max(0, deadline.timeIntervalSinceNow) * 1000)
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard remaining > 0, poll(&pfd, 1, remaining) > 0 else {
                kill(process.processIdentifier, SIGKILL)
                throw DBusError.timeout("dbus-daemon did not print its address")
            }
            var buffer = [UInt8](repeating: 0, count: 512)
            let n = read(fd, &buffer, buffer.count)
            guard n > 0 else {
                kill(process.processIdentifier, SIGKILL)
                throw DBusError.failed("dbus-daemon exited")
            }
            data += buffer[0..<n]
        }
        let line = String(decoding: data, as: UTF8.self)
        address = String(line.prefix { $0 != "\n" })
    }

    func connect() throws -> DBusConnection { try DBusConnection(address: address) }

    /// SIGKILL: the daemon inherits a signal mask that may block SIGTERM.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { stop() }
}

/// Runs `body` with a fresh private bus, stopped afterwards.
func withBus<R>(_ body: (TestBus) async throws -> R) async throws -> R {
    let bus = try TestBus()
    defer { bus.stop() }
    return try await body(bus)
}

/// Runs a command with a bounded wait and returns (status, stdout).
func runTool(_ path: String, _ arguments: [String], timeout: Duration = .seconds(10)) async throws -> (Int32, String) {
    let result = try await runToolCapturing(path, arguments, timeout: timeout)
    return (result.status, result.stdout)
}

/// Expects `body` to throw a DBusError named `name`; returns it.
@discardableResult
func expectDBusError(_ name: String, _ body: () async throws -> Void,
                     sourceLocation: SourceLocation = #_sourceLocation) async -> DBusError? {
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
    private let lock = NSLock()
    private var count: UInt32 = 7
    private var controls: [String: DBusCallControl] = [:]

    /// The control of the last `Slow` or `Stuck` call that started.
    func control(of member: String) -> DBusCallControl? { lock.withLock { controls[member] } }

    init(echoSignatures: [String] = []) { self.echoSignatures = echoSignatures }

    var interfaces: [DBusInterfaceDescription] {
        var methods = echoSignatures.enumerated().map { index, sig in
            DBusInterfaceDescription.Method(name: "Echo\(index)", inArguments: [.init("value", sig)], outArguments: [.init("value", sig)])
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
        return [DBusInterfaceDescription(
            name: Self.interfaceName, methods: methods,
            signals: [.init(name: "Ping", arguments: [.init("text", "s")])],
            properties: [
                .init(name: "Name", signature: "s", access: .read),
                .init(name: "Count", signature: "u", access: .readwrite, emitsChangedSignal: .true),
            ])]
    }

    struct Generic: Error {}

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        switch call.member {
        case "Add":
            guard let a = call.arguments[0].int32, let b = call.arguments[1].int32 else { throw DBusError.invalidArgs("ii") }
            return [.int32(a &+ b)]
        case "Fail":
            throw DBusError(name: call.arguments[0].string ?? "", message: call.arguments[1].string ?? "")
        case "FailGeneric":
            throw Generic()
        case "Slow":
            lock.withLock { controls["Slow"] = DBusCallControl.current }
            try await Task.sleep(for: .milliseconds(Int(call.arguments[0].uint32 ?? 0)))
            return []
        case "Stuck":
            // Ignores cancellation: waits on a detached task, which the handler's cancellation does not reach.
            lock.withLock { controls["Stuck"] = DBusCallControl.current }
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
    static let prepared = try? DBusPreparedReply([.vardict(inOrder: ["hello": .string("world"), "n": .int32(7)]), .uint32(42)])

    func propertyValues(interface: String) -> [String: DBusValue] {
        lock.lock(); defer { lock.unlock() }
        return ["Name": .string("test object"), "Count": .uint32(count)]
    }

    func setProperty(interface: String, name: String, value: DBusValue) async throws {
        lock.withLock { count = value.uint32 ?? count }
    }
}

/// Result of `runToolCapturing`.
struct ToolResult: Sendable {
    var status: Int32
    var stdout: String
    var stderr: String
    var elapsed: Duration
}

/// Runs a command, capturing stdout and stderr; the process is killed (and
/// `DBusError.timeout` thrown) when it has not finished within `timeout`.
///
/// The waiting happens on a dedicated thread: blocking a thread of Swift's cooperative
/// pool (as small as the CPU count) could starve the tasks in which exported objects
/// handle calls, so the tool's call would never be answered.
func runToolCapturing(_ path: String, _ arguments: [String], timeout: Duration = .seconds(15)) async throws -> ToolResult {
    try await onDedicatedThread { try runToolBlocking(path, arguments, timeout: timeout) }
}

/// Runs `body` on a new thread (not the cooperative pool) and returns its result.
func onDedicatedThread<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

private func runToolBlocking(_ path: String, _ arguments: [String], timeout: Duration) throws -> ToolResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    let done = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in done.signal() }
    let start = ContinuousClock.now
    let deadline = start + timeout
    try process.run()
    // Read both pipes until EOF, bounded by the deadline.
    var fds = [out.fileHandleForReading.fileDescriptor, err.fileHandleForReading.fileDescriptor]
    var collected: [Int32: [UInt8]] = [fds[0]: [], fds[1]: []]
    var buffer = [UInt8](repeating: 0, count: 4096)
    while !fds.isEmpty {
        let remaining = deadline - ContinuousClock.now
        let ms = Int32(clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000)
        var pfds = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        let rc = ms > 0 ? poll(&pfds, nfds_t(pfds.count), ms) : 0
        if rc < 0 && errno == EINTR { continue }
        guard rc > 0 else {
            kill(process.processIdentifier, SIGKILL)
            _ = done.wait(timeout: .now() + 5)
            throw DBusError.timeout("\(path) did not finish within \(timeout)")
        }
        for pfd in pfds where pfd.revents != 0 {
            let n = read(pfd.fd, &buffer, buffer.count)
            if n > 0 { collected[pfd.fd, default: []] += buffer[0..<n] } else { fds.removeAll { $0 == pfd.fd } }
        }
    }
    // Both pipes are closed: the process has exited or is about to.
    if done.wait(timeout: .now() + 5) == .timedOut {
        kill(process.processIdentifier, SIGKILL)
        throw DBusError.timeout("\(path) closed its output but did not exit")
    }
    return ToolResult(status: process.terminationStatus,
                      stdout: String(decoding: collected[out.fileHandleForReading.fileDescriptor] ?? [], as: UTF8.self),
                      stderr: String(decoding: collected[err.fileHandleForReading.fileDescriptor] ?? [], as: UTF8.self),
                      elapsed: ContinuousClock.now - start)
}
