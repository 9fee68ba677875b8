import BrokerAPI
import DBus
import SharedDeviceClient
import TestSupport
import Testing

/// From the attacker's side: an app owning no name sends every app on the bus the broker's own
/// signals (a sign-in of "mallory" whose display name asks for a password, a sign-out warning
/// and its cancellation), broadcast and addressed to each. Apps on the client library, and
/// `brokerctl watch` with them, believe the broker's signals only from the connection that owns
/// `io.shareddevice.Broker1` now.
@Suite("Forged broker signals", .timeLimit(.minutes(2)))
struct ForgedBrokerSignalTests {
    @Test("brokerctl watch and the client library ignore the broker's signals from anyone but the broker")
    func forgedAccountChanged() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let watcher = try await offThePool { try env.watch() }
        let library = try PublicClientApplication(
            clientId: "notes-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let warnings = try await library.signOutWarnings()
        let changes = try await library.subscribeToAccountChanges()
        let forger = try await ForgingApp(bus: env.bus)
        let mallory: [String: DBusValue] = [
            AccountKey.username: .string("mallory@contoso.example"),
            "displayName": .string("IT Support - enter your password again"),
        ]
        let forged: [(String, [DBusValue])] = [
            ("AccountChanged", [.vardict(mallory), .vardict([:]), .string("signed-in")]),
            ("SignOutPending", [.string("idle"), .uint64(1)]),
            ("SignOutCancelled", [.string("idle")]),
            ("AccountChanged", [.vardict([:]), .vardict(mallory), .string("signed-out")]),
        ]
        for (member, arguments) in forged {
            try await forger.forge(
                path: BrokerNames.objectPath, interface: BrokerNames.interface, member: member, arguments: arguments)
        }
        // Then the broker's own: the first change anyone hears is alice's sign-in.
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let line = try await offThePool {
            try watcher.waitForLine(timeout: .seconds(10)) { !$0.hasPrefix("watching") }
        }
        #expect(line.hasPrefix("signed-in: current") && line.contains("alice"), "\(line)")
        let first = await within(.seconds(10)) { try? await changes.first { _ in true } }
        #expect(first?.current?.username == TestUsers.alice.username, "\(String(describing: first))")
        // No warning was believed either. The library's connection read the forged ones before
        // alice's sign-in; half a second bounds the hop from its signal stream to the warnings.
        let warning = await within(.milliseconds(500)) { await warnings.first { _ in true } }
        #expect(warning == nil, "\(String(describing: warning))")
        #expect(!watcher.allOutput.contains("mallory") && !watcher.allOutput.contains("sign-out"))
    }
}
