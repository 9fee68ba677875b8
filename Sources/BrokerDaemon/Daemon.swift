import BrokerCore
import DBus
import Dispatch
import Glibc
import Identity
import Logging

/// What `brokerd` was asked to do, after its command line and configuration are read.
public struct DaemonOptions: Sendable {
    public var deviceMode: DeviceMode
    public var authority: String
    public var stateDirectory: String
    public var configuration: DaemonConfigurationFile
    public var busAddress: String?
    /// How long a person has to finish an interactive sign-in.
    public var interactiveTimeout: Duration

    public init(deviceMode: DeviceMode, authority: String, stateDirectory: String,
                configuration: DaemonConfigurationFile, busAddress: String? = nil,
                interactiveTimeout: Duration = .seconds(300)) {
        self.interactiveTimeout = interactiveTimeout
        self.deviceMode = deviceMode
        self.authority = authority
        self.stateDirectory = stateDirectory
        self.configuration = configuration
        self.busAddress = busAddress
    }

    /// `$XDG_STATE_HOME/shared-device-broker`, or `~/.local/state/shared-device-broker`.
    public static func defaultStateDirectory() -> String {
        if let state = getenv("XDG_STATE_HOME").map({ String(cString: $0) }), state.hasPrefix("/") {
            return state + "/shared-device-broker"
        }
        let home = getenv("HOME").map { String(cString: $0) } ?? "/tmp"
        return home + "/.local/state/shared-device-broker"
    }
}

/// brokerd: the broker on the session bus, from start to a clean stop.
public enum Daemon {
    public static let version = "0.1.0"

    /// Starts the broker, serves until SIGTERM/SIGINT or until the bus goes away, and returns
    /// the process exit status.
    public static func run(_ options: DaemonOptions, logger: Logger) async throws(DaemonError) -> Int32 {
        let authority: Authority
        do { authority = try Authority(options.authority) } catch {
            throw DaemonError.configuration("--authority \(options.authority): \(error)")
        }
        let store: FileStateStore
        do { store = try FileStateStore(directory: options.stateDirectory) } catch {
            throw DaemonError.state("cannot use the state directory: \(error)")
        }
        let initialState = try loadState(store, logger: logger)

        let connection: DBusConnection
        do {
            connection = try options.busAddress.map { try DBusConnection(address: $0, logger: logger) }
                ?? DBusConnection.sessionBus(logger: logger)
        } catch {
            throw DaemonError.bus("cannot connect to the session bus: \(error)")
        }
        defer { connection.close() }

        let tenant = options.configuration.tenantId ?? ""
        let clock = SystemClock()
        let provider = OIDCProvider(authority: authority, clock: clock, logger: logger,
                                    clientSecrets: try options.configuration.clientSecrets(), tenantId: tenant)
        let properties = PropertyCache([
            "DeviceMode": .string(options.deviceMode.rawValue),
            "BrokerVersion": .string(version),
            "CurrentAccount": BusMarshalling.account(options.deviceMode == .shared ? initialState.current : nil),
        ])
        let broker = Broker(
            configuration: BrokerConfiguration(
                deviceMode: options.deviceMode, brokerVersion: version, tenantId: tenant,
                knownClientIds: options.configuration.clients.map { Set($0.map(\.clientId)) },
                extraDeviceInformation: deviceFacts(), interactiveTimeout: options.interactiveTimeout),
            provider: provider, store: store, clock: clock, initialState: initialState, logger: logger,
            onAccountChange: { change in
                // Runs after the change is written and before the call that made it replies.
                let current = BusMarshalling.account(change.current)
                properties.set("CurrentAccount", current)
                do {
                    try connection.emitSignal(path: BrokerNames.objectPath, interface: BrokerNames.interface,
                                              member: BrokerNames.accountChangedSignal,
                                              arguments: BusMarshalling.accountChanged(change))
                    try connection.emitPropertiesChanged(path: BrokerNames.objectPath, interface: BrokerNames.interface,
                                                         changed: ["CurrentAccount": current])
                } catch {
                    logger.error("could not emit AccountChanged", metadata: ["error": "\(error)"])
                }
            })
        let callers = CallerPolicy(connection: connection, allowedExecutables: options.configuration.allowedExecutables(), logger: logger)
        connection.export(BrokerObject(broker: broker, logger: logger, properties: properties, callers: callers),
                          at: BrokerNames.objectPath)
        let departures = try await watchDepartures(connection, broker: broker, callers: callers)
        defer { departures.cancel() }

        // Catch SIGTERM/SIGINT before anyone can know we are here.
        let stop = StopRequests(connection)
        let reply: DBusConnection.RequestNameReply
        do { reply = try await connection.requestName(BrokerNames.busName) } catch {
            throw DaemonError.bus("cannot request the name \(BrokerNames.busName): \(error)")
        }
        guard reply == .primaryOwner else {
            throw DaemonError.bus("the name \(BrokerNames.busName) is already taken on this bus: is another brokerd running?")
        }
        logger.info("serving", metadata: ["mode": "\(options.deviceMode.rawValue)", "authority": "\(authority)",
                                          "state": "\(store.path)"])
        // The readiness line scripts and tests wait for.
        Console.printLine("brokerd ready: \(BrokerNames.busName) as \(connection.uniqueName), device mode \(options.deviceMode.rawValue)")

        let reason = await stop.next()
        logger.info("stopping", metadata: ["reason": "\(reason)"])
        _ = try? await connection.releaseName(BrokerNames.busName)
        return 0
    }

    /// Sign-ins and what the broker knows of a caller belong to its connection: when it leaves the bus, they go.
    static func watchDepartures(_ connection: DBusConnection, broker: Broker, callers: CallerPolicy) async throws(DaemonError) -> Task<Void, Never> {
        let changes: AsyncStream<DBusSignal>
        do {
            changes = try await connection.signals(matching: DBusMatchRule(
                sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus", member: "NameOwnerChanged"))
        } catch {
            throw DaemonError.bus("cannot watch the bus for callers leaving: \(error)")
        }
        return Task {
            for await change in changes {
                guard change.arguments.count == 3, let name = change.arguments[0].string, name.hasPrefix(":"),
                      change.arguments[2].string == "" else { continue }
                callers.forget(name)
                await broker.callerLeft(name)
            }
        }
    }

    /// Reads the saved state. A damaged or unsafe file is moved aside, never overwritten, and
    /// the broker starts signed out; a file from a newer brokerd stops the start.
    static func loadState(_ store: FileStateStore, logger: Logger) throws(DaemonError) -> BrokerState {
        do {
            if let state = try store.load() { return state }
            return BrokerState(deviceId: Broker.newDeviceId())
        } catch StoreError.newerFormat(let why) {
            throw DaemonError.state("\(why). Refusing to start rather than lose it; run the newer brokerd, or move the file away.")
        } catch {
            let aside = store.quarantine()
            logger.error("the saved state cannot be used; starting signed out", metadata: [
                "why": "\(error)", "keptAt": "\(aside ?? "(could not move it)")"])
            return BrokerState(deviceId: Broker.newDeviceId())
        }
    }

    /// Host and OS facts for `extraDeviceInformation`.
    static func deviceFacts() -> [String: String] {
        var facts: [String: String] = [:]
        var names = utsname()
        if uname(&names) == 0 {
            facts["hostname"] = withUnsafeBytes(of: &names.nodename) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            facts["os"] = withUnsafeBytes(of: &names.sysname) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            facts["osVersion"] = withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        return facts
    }
}

/// SIGTERM, SIGINT or the loss of the bus: the reasons brokerd stops. Installed before the
/// bus name is taken, so a stop request that comes right after start-up is never lost.
final class StopRequests {
    private let reasons: AsyncStream<String>
    private let continuation: AsyncStream<String>.Continuation
    private let sources: [any DispatchSourceSignal]
    private let watcher: Task<Void, Never>

    init(_ connection: DBusConnection) {
        signal(SIGPIPE, SIG_IGN)
        let (reasons, continuation) = AsyncStream<String>.makeStream()
        self.reasons = reasons
        self.continuation = continuation
        sources = [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")].map { number, name in
            // The dispatch source sees the signal only once its default action is off.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(name) }
            source.resume()
            return source
        }
        watcher = Task {
            await connection.waitUntilDisconnected()
            continuation.yield("the bus connection was lost")
        }
    }

    deinit {
        watcher.cancel()
        sources.forEach { $0.cancel() }
        continuation.finish()
    }

    /// Waits for the first reason to stop.
    func next() async -> String {
        for await reason in reasons { return reason }
        return "stopped"
    }
}
