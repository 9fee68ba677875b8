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
func runTool(_ path: String, _ arguments: [String], timeout: TimeInterval = 10) throws -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let out = Pipe()
    process.standardOutput = out
    process.standardError = FileHandle.nullDevice
    let done = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in done.signal() }
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    if done.wait(timeout: .now() + timeout) == .timedOut {
        kill(process.processIdentifier, SIGKILL)
        throw DBusError.timeout("\(path) did not finish")
    }
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
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
            try await Task.sleep(for: .milliseconds(Int(call.arguments[0].uint32 ?? 0)))
            return []
        case "WrongReply":
            return [.int32(1)]
        default:
            return call.arguments
        }
    }

    func propertyValues(interface: String) -> [String: DBusValue] {
        lock.lock(); defer { lock.unlock() }
        return ["Name": .string("test object"), "Count": .uint32(count)]
    }

    func setProperty(interface: String, name: String, value: DBusValue) async throws {
        lock.withLock { count = value.uint32 ?? count }
    }
}
