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
        self.broker = Broker(
            configuration: configuration, provider: provider, store: store, clock: clock,
            initialState: initialState, logger: logger, callers: callers, cleaner: cleaner,
            announce: { events in
                Self.announce(events, on: channel, properties: properties, shiftEvents: shiftEvents, logger: logger)
            })
        self.callers = callers
    }

    /// A caller left the bus: its sign-ins, and what the policy knew of it, go.
    func callerLeft(_ name: String) async {
        callers.forget(name)
        await broker.callerLeft(name)
    }

    /// What the core calls with the events of each change, in order; for a change of the state,
    /// after it is written and before the call that made it replies. Each event in its place, in
    /// one switch (a new kind of event does not compile until it has one): the property it changes
    /// first (whoever reads it on hearing the signal reads the new value), then its signal:
    /// `AccountChanged`, `SignOutPending` or `SignOutCancelled` to every app, `SignInProgress` to
    /// the caller that started the sign-in and nobody else; then the shift adapters hear it
    /// (``ShiftEvents``). After the last, one `PropertiesChanged` lists every property the change
    /// changed: a sign-out during a warning ends the deadline and the account in one.
    private static func announce(
        _ events: [BrokerEvent], on channel: any AnnouncementChannel, properties: PropertyCache,
        shiftEvents: ShiftEvents, logger: Logger
    ) {
        let path = BrokerNames.objectPath
        var changed: Set<Broker1Properties.Changing> = []
        for event in events {
            switch event {
            case .accountChanged(let change):
                properties.update { $0.currentAccount = change.current }
                changed.insert(.currentAccount)
                // Each signal on its own: one that fails must not take the others with it.
                do {
                    try channel.emitAccountChanged(
                        current: change.current, previous: change.departed, reason: change.reason.rawValue, path: path)
                } catch {
                    notEmitted(Broker1Signal.accountChanged.rawValue, error, logger)
                }
                shiftEvents.publish(.signedIn(change.current != nil))
            case .shiftWarning(let warning):
                let deadline: UInt64 =
                    switch warning {
                    case .pending(_, let at): UInt64(clamping: at) &* 1_000_000
                    case .cancelled, .over: 0
                    }
                properties.update { $0.signOutDeadline = deadline }
                changed.insert(.signOutDeadline)
                do {
                    switch warning {
                    case .pending(let cause, _):
                        try channel.emitSignOutPending(reason: cause.rawValue, deadline: deadline, path: path)
                    case .cancelled(let cause): try channel.emitSignOutCancelled(reason: cause.rawValue, path: path)
                    case .over: break
                    }
                } catch {
                    logger.critical("could not announce the sign-out warning", metadata: ["error": "\(error)"])
                }
                shiftEvents.publish(.warning(warning))
            case .signInProgress(let progress):
                do {
                    try channel.emitSignInProgress(
                        flowId: OutsideText.cleaned(progress.flowId), stage: progress.stage.rawValue,
                        details: progress.details, path: path, destination: progress.owner)
                } catch {
                    logger.debug("could not send SignInProgress", metadata: ["error": "\(error)"])
                }
            }
        }
        do {
            try channel.emitPropertiesChanged(changed, of: properties.typed, path: path)
        } catch {
            notEmitted("PropertiesChanged", error, logger)
        }
    }

    /// A change apps were not told of. A lost bus is the one way it can happen; a signal libdbus
    /// refused to build (`InvalidArgs`: an encoder let a string through that D-Bus cannot
    /// carry) is a bug, which stops a debug build, so that a test finds it, rather than leave
    /// every app on a sign-out it never heard of.
    private static func notEmitted(_ signal: String, _ error: any Error, _ logger: Logger) {
        logger.critical(
            "could not emit \(signal); apps were not told of the change", metadata: ["error": "\(error)"])
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
    var typed: Broker1Properties { storage.withLock { $0.typed } }
    func update(_ change: (inout Broker1Properties) -> Void) {
        storage.withLock { stored in
            change(&stored.typed)
            stored.byName = stored.typed.byName
        }
    }
}
