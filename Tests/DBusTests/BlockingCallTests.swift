import DBus
import Foundation
import TestSupport
import Testing

private let testPath = "/org/example/Test"
private let iface = TestObject.interfaceName

/// `callBlocking`: a synchronous call whose reply the connection thread hands over through a
/// condition variable, for code that cannot await (a state store's `save` on an actor).
@Suite("DBusConnection.callBlocking", .timeLimit(.minutes(1)))
struct BlockingCallTests {
    /// Blocks more tasks than Swift's cooperative pool has threads, all at once. Had the wait
    /// needed the pool to resume (an async call waited on with a semaphore), every pool thread
    /// would be stuck waiting for a resumption that could never run, and the calls would time out.
    @Test func completesWithEveryPoolThreadBlocked() async throws {
        try await withBus { bus in
            let client = try bus.connect()
            defer { client.close() }
            let tasks = max(ProcessInfo.processInfo.activeProcessorCount, 2) * 4
            let started = ContinuousClock.now
            let replies = try await withThrowingTaskGroup(of: [String].self) { group in
                for _ in 0..<tasks {
                    group.addTask {
                        try client.callBlocking(
                            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                            interface: "org.freedesktop.DBus", member: "ListNames",
                            timeout: .seconds(5)
                        ).first?.stringArray ?? []
                    }
                }
                return try await group.reduce(into: [[String]]()) { $0.append($1) }
            }
            #expect(replies.count == tasks)
            #expect(replies.allSatisfy { $0.contains(client.uniqueName) })
            #expect(
                ContinuousClock.now - started < .seconds(5),
                "the calls waited for their timeout: the wait needed the pool")
        }
    }

    @Test func repliesAndErrorRepliesFromAPeer() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            // The exported object answers from a Task on the pool: wait off it, so the test does
            // not depend on the pool's size.
            let sum = try await offThePool {
                try client.callBlocking(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "Add",
                    arguments: [.int32(40), .int32(2)], timeout: .seconds(5))
            }
            #expect(sum == [.int32(42)])
            let failure = try await offThePool { () -> DBusError? in
                do {
                    _ = try client.callBlocking(
                        destination: server.uniqueName, path: testPath, interface: iface, member: "Fail",
                        arguments: [.string("com.example.Error.Custom"), .string("it broke")],
                        timeout: .seconds(5))
                    return nil
                } catch let error as DBusError { return error }
            }
            #expect(failure == DBusError(name: "com.example.Error.Custom", message: "it broke"))
        }
    }

    @Test func timesOutWithNoReply() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let started = ContinuousClock.now
            let error = try await offThePool { () -> DBusError? in
                do {
                    _ = try client.callBlocking(
                        destination: server.uniqueName, path: testPath, interface: iface, member: "Slow",
                        arguments: [.uint32(5_000)], timeout: .milliseconds(200))
                    return nil
                } catch let error as DBusError { return error }
            }
            let elapsed = ContinuousClock.now - started
            #expect(error?.name == "org.freedesktop.DBus.Error.NoReply")
            #expect(elapsed >= .milliseconds(200) && elapsed < .seconds(3), "\(elapsed)")
            // The connection is still usable afterwards.
            let sum = try await offThePool {
                try client.callBlocking(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "Add",
                    arguments: [.int32(1), .int32(2)], timeout: .seconds(5))
            }
            #expect(sum == [.int32(3)])
        }
    }

    @Test func closedConnectionThrowsDisconnected() async throws {
        try await withBus { bus in
            let client = try bus.connect()
            client.close()
            await client.waitUntilDisconnected()
            await expectDBusError("org.freedesktop.DBus.Error.Disconnected") {
                _ = try client.callBlocking(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus", member: "GetId", timeout: .seconds(5))
            }
        }
    }

    /// `propertyValues` runs on the connection thread: a blocking call there would wait for
    /// itself, so it fails at once instead, and the Get that triggered it still gets its reply.
    @Test func refusesToWaitOnTheConnectionThread() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            let object = SelfCallingObject(connection: server)
            server.export(object, at: testPath)
            let reply = try await client.call(
                destination: server.uniqueName, path: testPath,
                interface: "org.freedesktop.DBus.Properties", member: "Get",
                arguments: [.string(SelfCallingObject.interfaceName), .string("Outcome")],
                timeout: .seconds(5))
            let outcome = reply.first?.string ?? ""
            #expect(outcome.hasPrefix("org.freedesktop.DBus.Error.Failed"), "\(outcome)")
        }
    }
}

/// Calls its own connection with `callBlocking` from `propertyValues` (the connection thread).
private final class SelfCallingObject: DBusObject, @unchecked Sendable {
    static let interfaceName = "org.example.SelfCalling"
    weak var connection: DBusConnection?

    init(connection: DBusConnection) { self.connection = connection }

    var interfaces: [DBusInterfaceDescription] {
        [DBusInterfaceDescription(name: Self.interfaceName, properties: [.init(name: "Outcome", signature: "s")])]
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] { [] }

    func propertyValues(interface: String) -> [String: DBusValue] {
        let outcome: String
        do {
            _ = try connection?.callBlocking(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus", member: "GetId", timeout: .seconds(2))
            outcome = "replied"
        } catch {
            outcome = "\(error)"
        }
        return ["Outcome": .string(outcome)]
    }
}
