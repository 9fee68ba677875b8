import DBus
import Foundation
import TestSupport
import Testing

private let testPath = "/org/example/Test"
private let iface = TestObject.interfaceName
private let wellKnownName = "org.example.MistypedCalls"

/// Calls with a wrong argument signature, or to unknown members, must get a prompt error
/// reply, also from tools that send exactly what they are told (dbus-send) instead of
/// coercing via introspection (gdbus, busctl).
@Suite("Mistyped calls", .timeLimit(.minutes(1)))
struct MistypedCallTests {
    /// Runs `dbus-send --print-reply` against the test object; its own reply timeout is 5 s,
    /// our bound on the whole process is 15 s.
    ///
    /// `--bus=ADDRESS` registers on the bus (Hello). dbus-send's `--address=ADDRESS` is a legacy
    /// alias of `--peer=ADDRESS` (no Hello): a dbus-daemon refuses such a client's calls with
    /// AccessDenied and drops it, so the call never reaches the object (see `addressOptionIsPeerMode`).
    private func dbusSend(
        _ bus: PrivateBus, dest: String, path: String = testPath, _ method: String,
        _ arguments: [String] = []
    ) async throws -> (result: CommandResult, elapsed: Duration) {
        try await runTimed(
            "/usr/bin/dbus-send",
            [
                "--bus=\(bus.address)", "--print-reply", "--reply-timeout=5000", "--dest=\(dest)", path, method,
            ] + arguments)
    }

    @Test func dbusSendMistypedCallsGetInvalidArgs() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            defer { server.close() }
            server.export(TestObject(echoSignatures: ["as"]), at: testPath)
            #expect(try await server.requestName(wellKnownName) == .primaryOwner)

            // Control: a well-typed call from dbus-send is answered.
            let ok = try await dbusSend(bus, dest: wellKnownName, "\(iface).Add", ["int32:2", "int32:3"]).result
            #expect(ok.status == 0, "\(ok.stderr)")
            #expect(ok.stdout.contains("int32 5"), "\(ok.stdout)")

            let cases: [(dest: String, method: String, arguments: [String], expected: String, got: String)] = [
                (wellKnownName, "Echo0", ["string:x"], "as", "s"),  // string where `as` is expected
                (server.uniqueName, "Echo0", ["string:x"], "as", "s"),
                (wellKnownName, "Echo0", [], "as", ""),  // missing argument
                (wellKnownName, "Add", [], "ii", ""),  // missing arguments
                (wellKnownName, "Add", ["int32:1"], "ii", "i"),  // one missing
                (wellKnownName, "Add", ["string:a", "string:b"], "ii", "ss"),  // wrong types
                (wellKnownName, "Add", ["int32:1", "int32:2", "int32:3"], "ii", "iii"),  // too many
                (wellKnownName, "Echo0", ["array:string:a"], "as", "as"),  // control below: this one is right
            ]
            for c in cases {
                let (result, elapsed) = try await dbusSend(bus, dest: c.dest, "\(iface).\(c.method)", c.arguments)
                #expect(elapsed < .seconds(4), "\(c.method) \(c.arguments) took \(elapsed)")
                if c.expected == c.got {
                    #expect(result.status == 0, "\(c.method) \(c.arguments): \(result.stderr)")
                    continue
                }
                #expect(result.status != 0, "\(c.method) \(c.arguments) succeeded: \(result.stdout)")
                #expect(
                    result.stderr.contains("org.freedesktop.DBus.Error.InvalidArgs"),
                    "\(c.method) \(c.arguments): \(result.stderr)")
                #expect(
                    result.stderr.contains("expects signature \"\(c.expected)\", got \"\(c.got)\""),
                    "\(c.method) \(c.arguments): \(result.stderr)")
            }
            #expect(server.isConnected)
        }
    }

    @Test func dbusSendUnknownMembersGetPromptErrors() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            defer { server.close() }
            server.export(TestObject(), at: testPath)
            #expect(try await server.requestName(wellKnownName) == .primaryOwner)
            let cases: [(path: String, method: String, arguments: [String], error: String)] = [
                (testPath, "\(iface).Nope", [], "org.freedesktop.DBus.Error.UnknownMethod"),
                (testPath, "\(iface).Nope", ["string:x"], "org.freedesktop.DBus.Error.UnknownMethod"),
                (
                    testPath, "org.example.Other.Add", ["int32:1", "int32:2"],
                    "org.freedesktop.DBus.Error.UnknownInterface"
                ),
                (
                    testPath, "org.freedesktop.DBus.Properties.Get", ["string:\(iface)"],
                    "org.freedesktop.DBus.Error.InvalidArgs"
                ),
                (testPath, "org.freedesktop.DBus.Introspectable.Nope", [], "org.freedesktop.DBus.Error.UnknownMethod"),
                ("/nothing/here", "\(iface).Add", ["int32:1", "int32:2"], "org.freedesktop.DBus.Error.UnknownObject"),
            ]
            for c in cases {
                let (result, elapsed) = try await dbusSend(
                    bus, dest: wellKnownName, path: c.path, c.method, c.arguments)
                #expect(elapsed < .seconds(4), "\(c.method) took \(elapsed)")
                #expect(result.status != 0, "\(c.method) succeeded: \(result.stdout)")
                #expect(result.stderr.contains(c.error), "\(c.method) \(c.arguments): \(result.stderr)")
            }
        }
    }

    /// The cause of the "mistyped dbus-send calls get NoReply" report: with `--address=`
    /// dbus-send does not register on the bus, so the daemon refuses the call (AccessDenied)
    /// and drops the connection (which dbus-send may report as NoReply) before it reaches us.
    @Test func addressOptionIsPeerMode() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            defer { server.close() }
            server.export(TestObject(echoSignatures: ["as"]), at: testPath)
            #expect(try await server.requestName(wellKnownName) == .primaryOwner)
            for arguments in [["string:x"], ["array:string:x"]] {  // mistyped and well-typed alike
                let (result, elapsed) = try await runTimed(
                    "/usr/bin/dbus-send",
                    [
                        "--address=\(bus.address)", "--print-reply", "--reply-timeout=5000", "--dest=\(wellKnownName)",
                        testPath, "\(iface).Echo0",
                    ] + arguments)
                #expect(elapsed < .seconds(4))
                #expect(result.status != 0)
                #expect(
                    result.stderr.contains("org.freedesktop.DBus.Error.AccessDenied")
                        || result.stderr.contains("org.freedesktop.DBus.Error.NoReply"), "\(result.stderr)")
            }
            // The same calls registered on the bus reach the object.
            let reached = try await dbusSend(bus, dest: wellKnownName, "\(iface).Echo0", ["array:string:x"]).result
            #expect(reached.status == 0, "\(reached.stderr)")
        }
    }

    @Test func ownCallsWithWrongTypesGetInvalidArgs() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(echoSignatures: ["as"]), at: testPath)
            let dest = server.uniqueName
            let cases: [(member: String, arguments: [DBusValue], expected: String, got: String)] = [
                ("Echo0", [.string("x")], "as", "s"),
                ("Echo0", [], "as", ""),
                ("Add", [.string("a"), .string("b")], "ii", "ss"),
                ("Add", [.int32(1)], "ii", "i"),
                ("Add", [.uint32(1), .uint32(2)], "ii", "uu"),
            ]
            for c in cases {
                for interface in [iface, ""] {  // explicit interface, and dispatch by member name
                    let start = ContinuousClock.now
                    let error = await expectDBusError("org.freedesktop.DBus.Error.InvalidArgs") {
                        _ = try await client.call(
                            destination: dest, path: testPath, interface: interface, member: c.member,
                            arguments: c.arguments, timeout: .seconds(5))
                    }
                    #expect(ContinuousClock.now - start < .seconds(4))
                    #expect(
                        error?.message.contains("expects signature \"\(c.expected)\", got \"\(c.got)\"") == true,
                        "\(error?.message ?? "")")
                }
            }
            // The connection keeps working afterwards.
            let echoed = try await client.call(
                destination: dest, path: testPath, interface: iface, member: "Echo0",
                arguments: [.strings(["a", "b"])], timeout: .seconds(5))
            #expect(echoed == [.strings(["a", "b"])])
        }
    }
}
