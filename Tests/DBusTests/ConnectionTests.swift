import DBus
import Foundation
import TestSupport
import Testing

private let testPath = "/org/example/Test"
private let iface = TestObject.interfaceName

/// Values covering every supported type, including nesting and empty containers.
private let sampleValues: [DBusValue] = [
    .string("héllo wörld ✓"), .bool(true), .bool(false), .byte(255), .int16(-32768), .uint16(65535),
    .int32(-2_000_000_000), .uint32(4_000_000_000), .int64(.min), .uint64(.max), .double(3.25),
    .objectPath("/a/b_c/D9"), .signature("a{sv}(iu)"),
    .strings(["a", "", "c"]), .strings([]),
    .vardict(["k1": .string("v"), "k2": .uint32(3), "nested": .vardict(["x": .strings(["y"])])]),
    .vardict([:]),
    .stringDict(["a": "b", "c": "d"]),
    .vardictArray([["a": .int32(1)], [:], ["b": .bool(false)]]),
    .vardictArray([]),
    .variant(.variant(.variant(.int64(5)))),
    .variant(.structure([.string("s"), .array(elementSignature: "y", [.byte(1), .byte(2)])])),
    .structure([.int32(1), .structure([.string("x"), .double(-0.5)]), .strings(["q"])]),
    .array(
        elementSignature: "(is)", [.structure([.int32(1), .string("one")]), .structure([.int32(2), .string("two")])]),
    .dictionary(keySignature: "u", valueSignature: "as", [DBusDictEntry(key: .uint32(1), value: .strings(["z"]))]),
    .array(
        elementSignature: "aas",
        [.array(elementSignature: "as", [.strings(["deep"])]), .array(elementSignature: "as", [])]),
    .array(elementSignature: "v", [.variant(.string("x")), .variant(.uint16(2))]),
]

@Suite("DBusConnection", .timeLimit(.minutes(1)))
struct ConnectionTests {
    @Test func roundTripsEveryType() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(echoSignatures: sampleValues.map(\.signature)), at: testPath)
            for (index, value) in sampleValues.enumerated() {
                let reply = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface,
                    member: "Echo\(index)", arguments: [value])
                #expect(reply == [value], "signature \(value.signature)")
            }
        }
    }

    @Test func accessors() {
        let dict = DBusValue.vardict(["b": .bool(true), "a": .string("x")])
        #expect(dict.signature == "a{sv}")
        #expect(dict.vardict?["a"]?.string == "x")
        #expect(dict.vardict?["b"]?.bool == true)
        #expect(DBusValue.stringDict(["k": "v"]).stringDict == ["k": "v"])
        #expect(DBusValue.strings(["a"]).stringArray == ["a"])
        #expect(DBusValue.vardictArray([["x": .uint32(1)]]).vardictArray?.first?["x"]?.uint32 == 1)
        #expect(DBusValue.variant(.variant(.int64(3))).int64 == 3)
        #expect(DBusValue.structure([.int32(1), .strings([])]).signature == "(ias)")
        let entries = dict.dictionaryEntries?.compactMap(\.key.string)
        #expect(entries == ["a", "b"])  // sorted keys
    }

    @Test func errorRepliesKeepNameAndMessage() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let error = await expectDBusError("com.example.Error.Custom") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "Fail",
                    arguments: [.string("com.example.Error.Custom"), .string("it broke")])
            }
            #expect(error?.message == "it broke")
            await expectDBusError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "FailGeneric")
            }
            // A handler returning the wrong signature yields Failed, not a malformed reply.
            await expectDBusError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "WrongReply")
            }
        }
    }

    @Test func aCallsControlCancelsItsTaskOrAnswersItEarly() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            let object = TestObject()
            server.export(object, at: testPath)
            let dest = server.uniqueName

            // Cancel: the handler's sleep ends at once with CancellationError, which becomes Failed.
            let started = ContinuousClock.now
            async let slow = expectDBusError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: iface, member: "Slow",
                    arguments: [.uint32(20_000)], timeout: .seconds(30))
            }
            let slowControl = try await Self.eventually { object.control(of: "Slow") }
            slowControl.cancel()
            _ = await slow
            #expect(ContinuousClock.now - started < .seconds(10))

            // Answer early: a handler that ignores cancellation still lets its caller go on.
            let stuckStarted = ContinuousClock.now
            async let stuck = expectDBusError("org.example.Error.Stopping") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: iface, member: "Stuck",
                    arguments: [.uint32(8_000)], timeout: .seconds(30))
            }
            let stuckControl = try await Self.eventually { object.control(of: "Stuck") }
            stuckControl.cancel()
            stuckControl.answer(DBusError(name: "org.example.Error.Stopping", message: "stopping"))
            #expect(await stuck?.message == "stopping")
            // The handler takes 8 s: well apart from an answer that waited for it, even on two busy cores.
            #expect(
                ContinuousClock.now - stuckStarted < .seconds(5), "the early answer did not wait for the handler")
            // The handler's own result, when it comes, is dropped; the connection goes on serving.
            try await Task.sleep(for: .seconds(8))
            let sum = try await client.call(
                destination: dest, path: testPath, interface: iface, member: "Add",
                arguments: [.int32(2), .int32(3)])
            #expect(sum.first?.int32 == 5)
        }
    }

    /// Polls `body` every 10 ms until it gives a value, for at most 5 s.
    private static func eventually<T>(_ body: () -> T?) async throws -> T {
        let end = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < end {
            if let value = body() { return value }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw DBusError.failed("timed out waiting")
    }

    @Test func immediateAnswersAndTheirFallThrough() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let atOnce = try await client.call(
                destination: server.uniqueName, path: testPath, interface: iface,
                member: "AnswerAtOnce", arguments: [.bool(true)])
            #expect(atOnce.first?.string == "at once")
            let later = try await client.call(
                destination: server.uniqueName, path: testPath, interface: iface,
                member: "AnswerAtOnce", arguments: [.bool(false)])
            #expect(later.first?.string == "task")
            // The out-signature rule holds on the immediate path too.
            await expectDBusError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "WrongAtOnce")
            }
            // A prepared reply goes to each caller as its own reply; its signature is checked too.
            for _ in 0..<3 {
                let prepared = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "Prepared")
                #expect(
                    prepared.first?.vardict?["hello"]?.string == "world" && prepared.first?.vardict?["n"]?.int32 == 7)
                #expect(prepared.last?.uint32 == 42)
            }
            await expectDBusError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "WrongPrepared")
            }
            // The in-signature check comes first, as for every call.
            await expectDBusError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface,
                    member: "AnswerAtOnce", arguments: [.string("yes")])
            }
        }
    }

    @Test func dispatchErrors() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let dest = server.uniqueName
            await expectDBusError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: iface, member: "Add", arguments: [.string("x")])
            }
            await expectDBusError("org.freedesktop.DBus.Error.UnknownMethod") {
                _ = try await client.call(destination: dest, path: testPath, interface: iface, member: "Nope")
            }
            await expectDBusError("org.freedesktop.DBus.Error.UnknownInterface") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: "org.example.Other", member: "Add")
            }
            await expectDBusError("org.freedesktop.DBus.Error.UnknownObject") {
                _ = try await client.call(
                    destination: dest, path: "/nothing/here", interface: iface, member: "Add",
                    arguments: [.int32(1), .int32(2)])
            }
            // Without an interface field the call is dispatched by member name.
            let byMember = try await client.call(
                destination: dest, path: testPath, interface: "", member: "Add",
                arguments: [.int32(40), .int32(2)])
            #expect(byMember == [.int32(42)])
            let introspected = try await client.call(
                destination: dest, path: testPath, interface: "", member: "Introspect")
            #expect(introspected.first?.string?.contains("org.example.Test") == true)
            let (status, out) = try await runTool(
                "/usr/bin/busctl", ["--address=\(bus.address)", "call", dest, testPath, iface, "Add", "ii", "2", "3"])
            #expect(status == 0)
            #expect(out.contains("i 5"))
        }
    }

    @Test func validatesBeforeSending() async throws {
        try await withBus { bus in
            let client = try bus.connect()
            defer { client.close() }
            let bad: [(String, String, String, String, [DBusValue])] = [
                ("org.example", "not a path", "org.example.X", "M", []),
                ("org.example", "/p", "bad..iface", "M", []),
                ("org.example", "/p", "org.example.X", "bad-member", []),
                ("bad name!", "/p", "org.example.X", "M", []),
                ("org.example", "/p", "org.example.X", "M", [.string("nul\0inside")]),
                ("org.example", "/p", "org.example.X", "M", [.objectPath("relative")]),
                ("org.example", "/p", "org.example.X", "M", [.array(elementSignature: "s", [.int32(1)])]),
                ("org.example", "/p", "org.example.X", "M", [.structure([])]),
                ("org.example", "/p", "org.example.X", "M", [.dictionary(keySignature: "v", valueSignature: "s", [])]),
            ]
            for (dest, path, interface, member, args) in bad {
                await expectDBusError("org.freedesktop.DBus.Error.InvalidArgs") {
                    _ = try await client.call(
                        destination: dest, path: path, interface: interface, member: member, arguments: args)
                }
            }
            #expect(throws: DBusError.self) { try client.emitSignal(path: "//", interface: "a.b", member: "C") }
            #expect(client.isConnected)
        }
    }

    @Test func standardInterfaces() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let dest = server.uniqueName
            let props = "org.freedesktop.DBus.Properties"

            let xml =
                try await client.call(
                    destination: dest, path: testPath, interface: "org.freedesktop.DBus.Introspectable",
                    member: "Introspect"
                ).first?.string ?? ""
            #expect(xml.contains("<interface name=\"org.example.Test\">"))
            #expect(xml.contains("<interface name=\"org.freedesktop.DBus.Peer\">"))
            #expect(xml.contains("<property name=\"Count\" type=\"u\" access=\"readwrite\">"))
            let root =
                try await client.call(
                    destination: dest, path: "/", interface: "org.freedesktop.DBus.Introspectable",
                    member: "Introspect"
                ).first?.string ?? ""
            #expect(root.contains("<node name=\"org\"/>"))
            #expect(!root.contains("<interface"))

            let name = try await client.call(
                destination: dest, path: testPath, interface: props, member: "Get",
                arguments: [.string(iface), .string("Name")])
            #expect(name == [.variant(.string("test object"))])
            let all = try await client.call(
                destination: dest, path: testPath, interface: props, member: "GetAll",
                arguments: [.string(iface)])
            #expect(all.first?.vardict == ["Name": .string("test object"), "Count": .uint32(7)])
            _ = try await client.call(
                destination: dest, path: testPath, interface: props, member: "Set",
                arguments: [.string(iface), .string("Count"), .variant(.uint32(9))])
            let count = try await client.call(
                destination: dest, path: testPath, interface: props, member: "Get",
                arguments: [.string(iface), .string("Count")])
            #expect(count.first?.uint32 == 9)
            await expectDBusError("org.freedesktop.DBus.Error.PropertyReadOnly") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: props, member: "Set",
                    arguments: [.string(iface), .string("Name"), .variant(.string("x"))])
            }
            await expectDBusError("org.freedesktop.DBus.Error.UnknownProperty") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: props, member: "Get",
                    arguments: [.string(iface), .string("Missing")])
            }
            await expectDBusError("org.freedesktop.DBus.Error.UnknownInterface") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: props, member: "GetAll",
                    arguments: [.string("org.example.Missing")])
            }
            await expectDBusError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: props, member: "Set",
                    arguments: [.string(iface), .string("Count"), .variant(.string("x"))])
            }
            _ = try await client.call(
                destination: dest, path: testPath, interface: "org.freedesktop.DBus.Peer", member: "Ping")
            let machine = try await client.call(
                destination: dest, path: testPath, interface: "org.freedesktop.DBus.Peer",
                member: "GetMachineId")
            #expect((machine.first?.string ?? "").count == 32)

            // External tools agree.
            let (status, out) = try await runTool(
                "/usr/bin/gdbus",
                [
                    "introspect", "--address", bus.address, "--dest", dest,
                    "--object-path", testPath, "--xml",
                ])
            #expect(status == 0)
            #expect(out.contains("org.example.Test"))
            let (treeStatus, tree) = try await runTool(
                "/usr/bin/busctl", ["--address=\(bus.address)", "tree", dest, "--list"])
            #expect(treeStatus == 0)
            #expect(tree.contains(testPath))
            let (propStatus, prop) = try await runTool(
                "/usr/bin/busctl", ["--address=\(bus.address)", "get-property", dest, testPath, iface, "Name"])
            #expect(propStatus == 0)
            #expect(prop.contains("\"test object\""))
        }
    }

    @Test func signalsAndSubscriptionRemoval() async throws {
        try await withBus { bus in
            let emitter = try bus.connect()
            let listener = try bus.connect()
            defer {
                emitter.close()
                listener.close()
            }
            let rule = DBusMatchRule(sender: emitter.uniqueName, path: testPath, interface: iface, member: "Ping")
            let stream = try await listener.signals(matching: rule)
            let other = try await listener.signals(
                matching: DBusMatchRule(
                    interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged"))
            try emitter.emitSignal(
                path: "/other", interface: iface, member: "Ping", arguments: [.string("filtered out")])
            try emitter.emitSignal(path: testPath, interface: iface, member: "Ping", arguments: [.string("one")])
            try emitter.emitPropertiesChanged(
                path: testPath, interface: iface, changed: ["Count": .uint32(1)], invalidated: ["Name"])
            var iterator = stream.makeAsyncIterator()
            let first = await iterator.next()
            #expect(first?.arguments == [.string("one")])
            #expect(first?.sender == emitter.uniqueName)
            #expect(first?.path == testPath)
            var otherIterator = other.makeAsyncIterator()
            let changed = await otherIterator.next()
            #expect(changed?.arguments.first?.string == iface)
            #expect(changed?.arguments[1].vardict == ["Count": .uint32(1)])
            #expect(changed?.arguments[2].stringArray == ["Name"])
        }
    }

    @Test func terminatingAStreamRemovesTheMatch() async throws {
        try await withBus { bus in
            let listener = try bus.connect()
            defer { listener.close() }
            let rule = DBusMatchRule(path: "/x", interface: "org.example.Gone", member: "Sig")
            do {
                let stream = try await listener.signals(matching: rule)
                let task = Task { for await _ in stream {} }
                task.cancel()
                await task.value
            }
            // RemoveMatch was queued before this call on the same connection, so the bus
            // processed it first: removing the rule again must fail.
            await expectDBusError("org.freedesktop.DBus.Error.MatchRuleNotFound") {
                _ = try await listener.call(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus", member: "RemoveMatch",
                    arguments: [.string(rule.ruleString)])
            }
        }
    }

    @Test func callTimeoutAndCancellation() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let start = ContinuousClock.now
            await expectDBusError("org.freedesktop.DBus.Error.NoReply") {
                _ = try await client.call(
                    destination: server.uniqueName, path: testPath, interface: iface, member: "Slow",
                    arguments: [.uint32(5000)], timeout: .milliseconds(200))
            }
            #expect(ContinuousClock.now - start < .seconds(3))

            let dest = server.uniqueName
            let task = Task {
                try await client.call(
                    destination: dest, path: testPath, interface: iface, member: "Slow", arguments: [.uint32(5000)])
            }
            task.cancel()
            await #expect(throws: CancellationError.self) { _ = try await task.value }
            // The connection keeps working.
            let sum = try await client.call(
                destination: dest, path: testPath, interface: iface, member: "Add",
                arguments: [.int32(1), .int32(2)])
            #expect(sum == [.int32(3)])
        }
    }

    @Test func missingNameIsServiceUnknown() async throws {
        try await withBus { bus in
            let client = try bus.connect()
            defer { client.close() }
            await expectDBusError("org.freedesktop.DBus.Error.ServiceUnknown") {
                _ = try await client.call(
                    destination: "org.example.NobodyHome", path: "/", interface: "org.example.X", member: "M")
            }
        }
    }

    @Test func manyConcurrentCalls() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: testPath)
            let dest = server.uniqueName
            let results = try await withThrowingTaskGroup(of: (Int32, [DBusValue]).self) { group in
                for i in Int32(0)..<200 {
                    group.addTask {
                        (
                            i,
                            try await client.call(
                                destination: dest, path: testPath, interface: iface, member: "Add",
                                arguments: [.int32(i), .int32(1000)])
                        )
                    }
                }
                var all: [(Int32, [DBusValue])] = []
                for try await r in group { all.append(r) }
                return all
            }
            #expect(results.count == 200)
            for (i, reply) in results { #expect(reply == [.int32(i + 1000)]) }
        }
    }

    @Test func requestAndReleaseName() async throws {
        try await withBus { bus in
            let a = try bus.connect()
            let b = try bus.connect()
            defer {
                a.close()
                b.close()
            }
            #expect(try await a.requestName("org.example.Named") == .primaryOwner)
            #expect(try await a.requestName("org.example.Named") == .alreadyOwner)
            #expect(try await b.requestName("org.example.Named") == .exists)
            a.export(TestObject(), at: testPath)
            let sum = try await b.call(
                destination: "org.example.Named", path: testPath, interface: iface, member: "Add",
                arguments: [.int32(2), .int32(2)])
            #expect(sum == [.int32(4)])
            try await a.releaseName("org.example.Named")
            #expect(try await b.requestName("org.example.Named") == .primaryOwner)
            await expectDBusError("org.freedesktop.DBus.Error.InvalidArgs") { _ = try await a.requestName("not valid") }
        }
    }

    @Test func closingFailsInFlightCalls() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer { server.close() }
            server.export(TestObject(), at: testPath)
            let dest = server.uniqueName
            let stream = try await client.signals(matching: DBusMatchRule(interface: iface))
            let task = Task {
                try await client.call(
                    destination: dest, path: testPath, interface: iface, member: "Slow", arguments: [.uint32(10_000)])
            }
            // Make sure the call was sent: a later call on the same connection was answered.
            _ = try await client.call(
                destination: dest, path: testPath, interface: iface, member: "Add", arguments: [.int32(0), .int32(0)])
            client.close()
            client.close()  // idempotent
            let error = await expectDBusError("org.freedesktop.DBus.Error.Disconnected") { _ = try await task.value }
            #expect(error != nil)
            for await _ in stream {}  // finishes
            await client.waitUntilDisconnected()
            #expect(!client.isConnected)
            await expectDBusError("org.freedesktop.DBus.Error.Disconnected") {
                _ = try await client.call(
                    destination: dest, path: testPath, interface: iface, member: "Add",
                    arguments: [.int32(0), .int32(0)])
            }
        }
    }

    @Test func busGoingAwayIsNoticed() async throws {
        let bus = try await offThePool { try PrivateBus() }
        let client = try bus.connect()
        bus.stop()
        await client.waitUntilDisconnected()
        #expect(!client.isConnected)
    }

    @Test func introspectionXMLIsCanonical() {
        let description = DBusInterfaceDescription(
            name: "org.example.I",
            methods: [
                .init(name: "M", inArguments: [.init("a", "s")], outArguments: [.init("b", "u")]), .init(name: "N"),
            ],
            signals: [.init(name: "S", arguments: [.init("x", "as")])],
            properties: [.init(name: "P", signature: "b", access: .read, emitsChangedSignal: .false)])
        #expect(
            description.introspectionXML == """
                <interface name="org.example.I">
                  <method name="M">
                    <arg name="a" type="s" direction="in"/>
                    <arg name="b" type="u" direction="out"/>
                  </method>
                  <method name="N"/>
                  <signal name="S">
                    <arg name="x" type="as"/>
                  </signal>
                  <property name="P" type="b" access="read">
                    <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
                  </property>
                </interface>

                """)
        #expect(
            DBusMatchRule(path: "/a", member: "B", arg0: "it's").ruleString
                == "type='signal',path='/a',member='B',arg0='it'\\''s'")
    }
}
