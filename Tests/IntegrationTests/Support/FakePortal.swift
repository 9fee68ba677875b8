import DBus
import Foundation
import TestSupport

/// The desktop portal's OpenURI, for tests: owns `org.freedesktop.portal.Desktop` on the private
/// bus, records each URL it is asked to open, and answers the request as xdg-desktop-portal does
/// (the handle from `handle_token`, then `Response` on it) with the code the test chose. It opens
/// nothing: the test then acts as the person's browser with the recorded URL.
final class FakePortal: DBusObject, @unchecked Sendable {
    let connection: DBusConnection
    /// What `Response` carries: 0 opened, 1 the person declined, 2 it failed; nil: it never answers.
    let response: UInt32?
    private let state = NSCondition()
    private var opened: [String] = []
    private var taken = 0

    init(bus: PrivateBus, response: UInt32? = 0) async throws {
        self.response = response
        connection = try await offThePool { try DBusConnection(address: bus.address) }
        connection.export(self, at: "/org/freedesktop/portal/desktop")
        guard try await connection.requestName("org.freedesktop.portal.Desktop") == .primaryOwner else {
            throw ProcessFailure("the portal's name is taken on the test bus")
        }
    }

    deinit { connection.close() }

    var interfaces: [DBusInterfaceDescription] {
        [
            DBusInterfaceDescription(
                name: "org.freedesktop.portal.OpenURI",
                methods: [
                    .init(
                        name: "OpenURI",
                        inArguments: [.init("parent_window", "s"), .init("uri", "s"), .init("options", "a{sv}")],
                        outArguments: [.init("handle", "o")])
                ])
        ]
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        guard let uri = call.arguments[1].string else { throw DBusError.invalidArgs("no uri") }
        let token = call.arguments[2].vardict?["handle_token"]?.string ?? "t\(UInt32.random(in: 0...UInt32.max))"
        let sender = String(call.sender.dropFirst().map { $0 == "." ? "_" : $0 })
        let handle = "/org/freedesktop/portal/desktop/request/\(sender)/\(token)"
        state.withLock {
            opened.append(uri)
            state.broadcast()
        }
        // Before the reply: the caller must have subscribed before it called.
        if let response {
            try connection.emitSignal(
                path: handle, interface: "org.freedesktop.portal.Request", member: "Response",
                arguments: [.uint32(response), .vardict([:])], destination: call.sender)
        }
        return [.objectPath(handle)]
    }

    func propertyValues(interface: String) -> [String: DBusValue] { [:] }

    /// How many URLs it was asked to open so far.
    var openedCount: Int { state.withLock { opened.count } }

    /// The next URL it was asked to open, waiting at most `timeout`.
    func nextURL(timeout: Duration = .seconds(20)) async throws -> String {
        try await offThePool {
            let deadline = Date().addingTimeInterval(timeout.seconds)
            self.state.lock()
            defer { self.state.unlock() }
            while self.taken == self.opened.count {
                if !self.state.wait(until: deadline) {
                    throw ProcessFailure("nothing was opened through the portal within \(timeout)")
                }
            }
            self.taken += 1
            return self.opened[self.taken - 1]
        }
    }
}
