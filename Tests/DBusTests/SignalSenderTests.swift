import DBus
import TestSupport
import Testing

private let path = "/org/example/Service"
private let interface = "org.example.Service"
private let service = "org.example.Service"

/// A signal claiming a well-known name, from the attacker's side: dbus-daemon delivers a signal
/// addressed to a connection whatever its match rules, so only the connection's own check of the
/// sender stands between any program on the bus and a subscriber.
@Suite("Signal senders", .timeLimit(.minutes(1)))
struct SignalSenderTests {
    /// Sends `member` from `from`, broadcast and addressed to `to`, then waits until the bus has
    /// routed them (a call's reply comes after every message sent before it).
    private func send(_ member: String, from: DBusConnection, to: DBusConnection, tag: String) async throws {
        try from.emitSignal(path: path, interface: interface, member: member, arguments: [.string(tag)])
        try from.emitSignal(
            path: path, interface: interface, member: member, arguments: [.string(tag)], destination: to.uniqueName)
        _ = try await from.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetId")
    }

    /// The tags of what `stream` yields up to and including the second `last` (`send` sends two).
    private func tags(_ stream: AsyncStream<DBusSignal>, until last: String) async -> [String] {
        var seen: [String] = []
        for await signal in stream {
            let tag = signal.arguments.first?.string ?? "?"
            seen.append(tag + "@" + signal.sender)
            if seen.filter({ $0.hasPrefix(last + "@") }).count == 2 { break }
        }
        return seen
    }

    @Test("a well-known sender is believed from its owner now, never from a connection claiming it")
    func wellKnownSenderIsItsOwner() async throws {
        try await withBus { bus in
            let owner = try bus.connect()
            let attacker = try bus.connect()  // owns no name
            let next = try bus.connect()
            let listener = try bus.connect()
            defer { for connection in [owner, attacker, next, listener] { connection.close() } }
            #expect(try await owner.requestName(service) == .primaryOwner)
            let stream = try await listener.signals(
                matching: DBusMatchRule(sender: service, path: path, interface: interface))

            try await send("Changed", from: attacker, to: listener, tag: "forged")
            try await send("Changed", from: owner, to: listener, tag: "first")
            #expect(
                await tags(stream, until: "first") == ["first@\(owner.uniqueName)", "first@\(owner.uniqueName)"])

            // The name changes hands: the old owner is now a nobody, the new one is believed.
            try await owner.releaseName(service)
            #expect(try await next.requestName(service) == .primaryOwner)
            try await send("Changed", from: owner, to: listener, tag: "former")
            try await send("Changed", from: next, to: listener, tag: "second")
            #expect(await tags(stream, until: "second") == ["second@\(next.uniqueName)", "second@\(next.uniqueName)"])

            // Nobody owns it: nothing claiming it is believed, not even from its last owner.
            try await next.releaseName(service)
            try await send("Changed", from: next, to: listener, tag: "orphan")
            #expect(try await owner.requestName(service) == .primaryOwner)
            try await send("Changed", from: owner, to: listener, tag: "third")
            #expect(await tags(stream, until: "third") == ["third@\(owner.uniqueName)", "third@\(owner.uniqueName)"])
        }
    }

    @Test("a forged NameOwnerChanged neither moves a followed name nor reaches the bus's subscribers")
    func forgedOwnerChangeIsIgnored() async throws {
        try await withBus { bus in
            let owner = try bus.connect()
            let attacker = try bus.connect()
            let listener = try bus.connect()
            defer { for connection in [owner, attacker, listener] { connection.close() } }
            #expect(try await owner.requestName(service) == .primaryOwner)
            let stream = try await listener.signals(
                matching: DBusMatchRule(sender: service, path: path, interface: interface))
            let driver = try await listener.signals(
                matching: DBusMatchRule(
                    sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                    arg0: service))
            // "The name is the attacker's now", addressed to the listener alone and broadcast.
            let claim: [DBusValue] = [.string(service), .string(owner.uniqueName), .string(attacker.uniqueName)]
            for destination in [listener.uniqueName, nil] {
                try attacker.emitSignal(
                    path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                    arguments: claim, destination: destination)
            }
            try await send("Changed", from: attacker, to: listener, tag: "forged")
            try await send("Changed", from: owner, to: listener, tag: "real")
            #expect(await tags(stream, until: "real") == ["real@\(owner.uniqueName)", "real@\(owner.uniqueName)"])

            // The bus's own change is the first NameOwnerChanged the listener hears.
            try await owner.releaseName(service)
            var changes = driver.makeAsyncIterator()
            let change = await changes.next()
            #expect(change?.sender == "org.freedesktop.DBus")
            #expect(change?.arguments == [.string(service), .string(owner.uniqueName), .string("")])
        }
    }

    @Test("a unique sender is believed from that connection alone")
    func uniqueSender() async throws {
        try await withBus { bus in
            let emitter = try bus.connect()
            let attacker = try bus.connect()
            let listener = try bus.connect()
            defer { for connection in [emitter, attacker, listener] { connection.close() } }
            let stream = try await listener.signals(
                matching: DBusMatchRule(sender: emitter.uniqueName, path: path, interface: interface))
            try await send("Changed", from: attacker, to: listener, tag: "forged")
            try await send("Changed", from: emitter, to: listener, tag: "real")
            #expect(await tags(stream, until: "real") == ["real@\(emitter.uniqueName)", "real@\(emitter.uniqueName)"])
        }
    }
}
