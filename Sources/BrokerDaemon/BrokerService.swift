import BrokerCore
import DBus
import Locking
import Logging

/// The broker on the bus, whatever interface a caller speaks: the core (``Broker``), the cached
/// D-Bus properties, the announcement of each change of the device's account, and the policy of
/// who may call. Each exported interface is a thin adapter over it (``BrokerObject`` for
/// `io.shareddevice.Broker1`), so a second interface is another adapter, never a second broker.
final class BrokerService: Sendable {
    let broker: Broker
    /// The properties, cached so that Get/GetAll never wait for the broker actor.
    let properties: PropertyCache
    let callers: CallerPolicy
    /// The account's and the warnings' changes, for the adapters that follow the shift.
    let shiftEvents: ShiftEvents

    /// `channel` is where changes are announced (the connection brokerd serves on), `callers`
    /// who may call.
    init(
        configuration: BrokerConfiguration, provider: any IdentityProvider, store: any StateStore, clock: any WallClock,
        initialState: BrokerState, cleaner: any DeviceCleaner = NothingToClean(), channel: any AnnouncementChannel,
        callers: CallerPolicy, logger: Logger
    ) {
        let properties = PropertyCache(
            Broker1Properties(
                deviceMode: configuration.deviceMode.rawValue,
                currentAccount: configuration.deviceMode == .shared ? initialState.current : nil,
                brokerVersion: configuration.brokerVersion, signOutDeadline: 0))
        self.properties = properties
        let shiftEvents = ShiftEvents()
        self.shiftEvents = shiftEvents
        let announce = Self.announcing(on: channel, properties: properties, logger: logger)
        let warn = Self.warning(on: channel, properties: properties, logger: logger)
        self.broker = Broker(
            configuration: configuration, provider: provider, store: store, clock: clock,
            initialState: initialState, logger: logger, callers: callers, cleaner: cleaner,
            onAccountChange: { change in
                announce(change)
                shiftEvents.publish(.signedIn(change.current != nil))
            },
            onSignInProgress: Self.reporting(on: channel, logger: logger),
            onShiftWarning: { warning in
                warn(warning)
                shiftEvents.publish(.warning(warning))
            })
        self.callers = callers
    }

    /// A caller left the bus: its sign-ins, and what the policy knew of it, go.
    func callerLeft(_ name: String) async {
        callers.forget(name)
        await broker.callerLeft(name)
    }

    /// `SignInProgress` to the caller that started the sign-in, and to nobody else.
    private static func reporting(on channel: any AnnouncementChannel, logger: Logger)
        -> @Sendable (SignInProgressReport) -> Void
    {
        { progress in
            do {
                try channel.emitSignInProgress(
                    flowId: OutsideText.cleaned(progress.flowId), stage: progress.stage.rawValue,
                    details: progress.details, path: BrokerNames.objectPath, destination: progress.owner)
            } catch {
                logger.debug("could not send SignInProgress", metadata: ["error": "\(error)"])
            }
        }
    }

    /// A warning of a sign-out the person did not ask for: `SignOutDeadline` set first (whoever
    /// reads it on hearing the signal reads the new value), then `SignOutPending` or
    /// `SignOutCancelled` to every app, then `PropertiesChanged`.
    private static func warning(on channel: any AnnouncementChannel, properties: PropertyCache, logger: Logger)
        -> @Sendable (ShiftWarning) -> Void
    {
        { warning in
            let deadline: UInt64 =
                switch warning {
                case .pending(_, let at): UInt64(clamping: at) &* 1_000_000
                case .cancelled, .over: 0
                }
            properties.update { $0.signOutDeadline = deadline }
            let path = BrokerNames.objectPath
            do {
                switch warning {
                case .pending(let cause, _):
                    try channel.emitSignOutPending(reason: cause.rawValue, deadline: deadline, path: path)
                case .cancelled(let cause): try channel.emitSignOutCancelled(reason: cause.rawValue, path: path)
                case .over: break
                }
                try channel.emitSignOutDeadlineChanged(deadline, path: path)
            } catch {
                logger.critical("could not announce the sign-out warning", metadata: ["error": "\(error)"])
            }
        }
    }

    /// What the core calls once per change of the device's account, after the change is written
    /// and before the call that made it replies: the `CurrentAccount` property, then
    /// `AccountChanged` and `PropertiesChanged` on the bus.
    private static func announcing(
        on channel: any AnnouncementChannel, properties: PropertyCache,
        logger: Logger
    ) -> @Sendable (DeviceAccountChange) -> Void {
        { change in
            properties.update { $0.currentAccount = change.current }
            // Each signal on its own: one that fails must not take the other with it.
            do {
                try channel.emitAccountChanged(
                    current: change.current, previous: change.departed, reason: change.reason.rawValue,
                    path: BrokerNames.objectPath)
            } catch {
                notEmitted(Broker1Signal.accountChanged.rawValue, error, logger)
            }
            do {
                try channel.emitCurrentAccountChanged(change.current, path: BrokerNames.objectPath)
            } catch {
                notEmitted("PropertiesChanged", error, logger)
            }
        }
    }

    /// A change apps were not told of. A lost bus is the one way it can happen; a signal libdbus
    /// refused to build (`InvalidArgs`: BusMarshalling let a string through that D-Bus cannot
    /// carry) is a bug, which stops a debug build, so that a test finds it, rather than leave
    /// every app on a sign-out it never heard of.
    private static func notEmitted(_ signal: String, _ error: any Error, _ logger: Logger) {
        logger.critical(
            "could not emit \(signal); apps were not told of the change of account", metadata: ["error": "\(error)"])
        assert((error as? DBusError)?.name != DBusError.invalidArgs("").name, "\(signal) could not be built: \(error)")
    }
}

/// Where the service announces what changed: the bus connection brokerd serves on (in tests, a
/// recorder).
protocol AnnouncementChannel: Sendable {
    func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue], destination: String?)
        throws
    func emitPropertiesChanged(
        path: String, interface: String, changed: [String: DBusValue], invalidated: [String]) throws
}

extension DBusConnection: AnnouncementChannel {}

/// Property values shared between the connection's thread (reads) and the broker (writes): typed
/// as the contract declares them, and kept by name as Get and GetAll serve them, so that a read
/// builds nothing.
final class PropertyCache: Sendable {
    private let storage: Locked<(typed: Broker1Properties, byName: [String: DBusValue])>
    init(_ initial: Broker1Properties) { storage = Locked((initial, initial.byName)) }
    var values: [String: DBusValue] { storage.withLock { $0.byName } }
    func update(_ change: (inout Broker1Properties) -> Void) {
        storage.withLock { stored in
            change(&stored.typed)
            stored.byName = stored.typed.byName
        }
    }
}
