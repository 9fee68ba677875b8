import BrokerCore
import CoreFakes
import DBus
import Locking
import Logging
import Testing

@testable import BrokerDaemon

/// The service object without a bus: its properties start from the state, and a change of the
/// device's account reaches the property cache and then the bus, in that order, before the call
/// that made it returns.
@Suite("Broker service: properties and announcements")
struct BrokerServiceTests {
    /// Records what the service emits, with the `CurrentAccount` property as it was at that moment.
    final class RecordingChannel: AnnouncementChannel {
        struct Emission: Sendable {
            var member: String
            var arguments: [DBusValue]
            var propertyAtEmission: DBusValue?
            var deadlineAtEmission: DBusValue?
        }
        let emitted = Locked<[Emission]>([])
        let properties = Locked<PropertyCache?>(nil)

        func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue], destination: String?) {
            record(member, arguments)
        }

        func emitPropertiesChanged(path: String, interface: String, changed: [String: DBusValue], invalidated: [String])
        {
            record("PropertiesChanged", [.vardict(changed)])
        }

        private func record(_ member: String, _ arguments: [DBusValue]) {
            let values = properties.withLock { $0 }?.values
            let emission = Emission(
                member: member, arguments: arguments, propertyAtEmission: values?["CurrentAccount"],
                deadlineAtEmission: values?["SignOutDeadline"])
            emitted.withLock { $0.append(emission) }
        }
    }

    static let alice = Account(
        username: "alice@contoso.example", identifier: "oid-a.t", tenantId: "t",
        environment: "login.example", name: "Alice")

    static func state(current: Account?) -> BrokerState {
        BrokerState(
            deviceId: "d-1", current: current,
            clients: ["mail": ClientRecord(lastSeen: current, account: current, refreshToken: "rt-1")])
    }

    static func service(
        mode: DeviceMode, current: Account?, channel: RecordingChannel, idleSignOut: IdleSignOut? = nil
    ) -> BrokerService {
        let service = BrokerService(
            configuration: BrokerConfiguration(deviceMode: mode, brokerVersion: "test", idleSignOut: idleSignOut),
            provider: UnreachableProvider(), store: DiscardingStore(), clock: FixedClock(),
            initialState: Self.state(current: current), channel: channel,
            callers: CallerPolicy(ownUserId: 0, allowedExecutables: [:], logger: Logger(label: "test")) { _ in
                CallerPolicy.Credentials(userId: 0)
            },
            logger: Logger(label: "test"))
        channel.properties.withLock { $0 = service.properties }
        return service
    }

    @Test func thePropertiesStartFromTheStateAndTheMode() {
        let shared = Self.service(mode: .shared, current: Self.alice, channel: RecordingChannel())
        #expect(shared.properties.values["DeviceMode"] == .string("shared"))
        #expect(shared.properties.values["CurrentAccount"] == Self.alice.busValue)
        // In default mode there is no device account, whoever an app signed in.
        let personal = Self.service(mode: .default, current: Self.alice, channel: RecordingChannel())
        #expect(personal.properties.values["CurrentAccount"] == DBusValue.vardict([:]))
    }

    @Test func aSignOutSetsThePropertyThenSignalsBeforeItReturns() async throws {
        let channel = RecordingChannel()
        let service = Self.service(mode: .shared, current: Self.alice, channel: channel)
        _ = try await service.broker.signOut(clientId: "mail", accountId: "")

        let emitted = channel.emitted.withLock { $0 }
        #expect(emitted.map(\.member) == [Broker1Signal.accountChanged.rawValue, "PropertiesChanged"])
        let nobody = DBusValue.vardict([:])
        let arguments = emitted.first?.arguments ?? []
        #expect(arguments.first == nobody && arguments.last == .string("signed-out"))
        // previous: the account, and why it was signed out.
        var previous = Self.alice.busValue.vardict ?? [:]
        previous[AccountKey.signOutCause] = .string(SignOutCause.app.rawValue)
        #expect(arguments.dropFirst().first?.vardict == previous)
        #expect(emitted.last?.arguments == [.vardict(["CurrentAccount": nobody])])
        // Whoever reads the property on hearing the signal reads the new account.
        #expect(emitted.allSatisfy { $0.propertyAtEmission == nobody })
        #expect(service.properties.values["CurrentAccount"] == nobody)
    }

    /// The inactivity warning: the property first (whoever reads it on hearing the signal reads
    /// the deadline), then `SignOutPending` with the same deadline, then `PropertiesChanged`;
    /// activity sets it back to 0 the same way, with `SignOutCancelled`.
    @Test func theWarningSetsThePropertyThenSignals() async throws {
        let channel = RecordingChannel()
        let service = Self.service(
            mode: .shared, current: Self.alice, channel: channel, idleSignOut: IdleSignOut(after: 300, warning: 60))
        let deadline = UInt64(FixedClock().now() + 60) * 1_000_000
        await service.broker.personInactive()
        await service.broker.personActive()

        let emitted = channel.emitted.withLock { $0 }
        #expect(
            emitted.map(\.member) == [
                Broker1Signal.signOutPending.rawValue, "PropertiesChanged", Broker1Signal.signOutCancelled.rawValue,
                "PropertiesChanged",
            ])
        #expect(emitted.first?.arguments == [.string("idle"), .uint64(deadline)])
        #expect(emitted.dropFirst().first?.arguments == [.vardict(["SignOutDeadline": .uint64(deadline)])])
        #expect(emitted.dropFirst(2).first?.arguments == [.string("idle")])
        #expect(emitted.last?.arguments == [.vardict(["SignOutDeadline": .uint64(0)])])
        #expect(emitted.map(\.deadlineAtEmission) == [.uint64(deadline), .uint64(deadline), .uint64(0), .uint64(0)])
    }

    /// A sign-out during the warning changes the account and ends the deadline in one change: both
    /// properties set before `AccountChanged`, then one `PropertiesChanged` that lists both.
    @Test func aSignOutDuringAWarningSendsOnePropertiesChangedListingBoth() async throws {
        let channel = RecordingChannel()
        let service = Self.service(
            mode: .shared, current: Self.alice, channel: channel, idleSignOut: IdleSignOut(after: 300, warning: 60))
        await service.broker.personInactive()
        channel.emitted.withLock { $0.removeAll() }
        _ = try await service.broker.signOut(clientId: "mail", accountId: "")

        let emitted = channel.emitted.withLock { $0 }
        #expect(emitted.map(\.member) == [Broker1Signal.accountChanged.rawValue, "PropertiesChanged"])
        let nobody = DBusValue.vardict([:])
        #expect(emitted.last?.arguments == [.vardict(["CurrentAccount": nobody, "SignOutDeadline": .uint64(0)])])
        #expect(emitted.allSatisfy { $0.propertyAtEmission == nobody && $0.deadlineAtEmission == .uint64(0) })
    }

    /// The last line of defence: an account that reached the service with a string D-Bus cannot
    /// carry (the boundaries replace them as they enter; this one slipped past) is announced all
    /// the same, replaced, in messages libdbus builds, so that no app misses the change.
    @Test func anAccountWithANULIsStillAnnouncedToEveryApp() async throws {
        var mallory = Self.alice
        mallory.name = "Mallory\u{0}\u{1B}[31m\u{7}\u{202E}"
        let channel = RecordingChannel()
        let service = Self.service(mode: .shared, current: mallory, channel: channel)
        _ = try DBusPreparedReply([.vardict(service.properties.values)])  // GetAll at start
        _ = try await service.broker.signOut(clientId: "mail", accountId: "")

        let emitted = channel.emitted.withLock { $0 }
        #expect(emitted.map(\.member) == [Broker1Signal.accountChanged.rawValue, "PropertiesChanged"])
        for emission in emitted { _ = try DBusPreparedReply(emission.arguments) }
        let previous = emitted.first?.arguments[1].vardict
        #expect(previous?["name"]?.string == "Mallory\u{FFFD}\u{FFFD}[31m\u{FFFD}\u{202E}")
        #expect(previous?["username"]?.string == mallory.username)
    }

    @Test func aCallerThatLeftIsLookedUpAgain() async throws {
        let lookups = Locked(0)
        let service = BrokerService(
            configuration: BrokerConfiguration(deviceMode: .shared, brokerVersion: "test"),
            provider: UnreachableProvider(), store: DiscardingStore(), clock: FixedClock(),
            initialState: Self.state(current: nil), channel: RecordingChannel(),
            callers: CallerPolicy(ownUserId: 0, allowedExecutables: [:], logger: Logger(label: "test")) { _ in
                lookups.withLock { $0 += 1 }
                return CallerPolicy.Credentials(userId: 0)
            },
            logger: Logger(label: "test"))
        try await service.callers.authorize(sender: ":1.9", clientId: nil)
        await service.callerLeft(":1.9")
        try await service.callers.authorize(sender: ":1.9", clientId: nil)
        #expect(lookups.withLock { $0 } == 2)
    }
}
