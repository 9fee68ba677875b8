import BrokerCore
import DBus
import Dispatch
import Glibc
import Identity
import Logging
import Synchronization

/// What `brokerd` was asked to do, after its command line and configuration are read.
public struct DaemonOptions: Sendable {
    public var deviceMode: DeviceMode
    public var authority: String
    public var stateDirectory: String
    public var configuration: DaemonConfigurationFile
    public var busAddress: String?
    /// How long a person has to finish an interactive sign-in.
    public var interactiveTimeout: Duration
    /// How long calls in flight may take to finish once brokerd is asked to stop (SIGTERM,
    /// SIGINT); those still running then are cancelled and answered with `Cancelled`.
    public var stopGracePeriod: Duration = .seconds(10)

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
        var options = options
        // Started by D-Bus activation: serve the bus that started us.
        if options.busAddress == nil { options.busAddress = activationBusAddress() }
        let authority: Authority
        do { authority = try Authority(options.authority) } catch {
            throw DaemonError.configuration("--authority \(options.authority): \(error)")
        }
        let store: FileStateStore
        do { store = try FileStateStore(directory: options.stateDirectory) } catch {
            throw DaemonError.state("cannot use the state directory: \(error)")
        }
        // Tokens go where --token-storage says (the Secret Service by default), never silently elsewhere.
        let (tokenStore, initialState) = try TokenStorageSetup.open(
            options.configuration.tokenStorage ?? .secretService, files: store, loaded: try loadState(store, logger: logger),
            busAddress: options.busAddress, logger: logger)

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
            provider: provider, store: tokenStore, clock: clock, initialState: initialState, logger: logger,
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
        let calls = CallsInFlight(BrokerObject(broker: broker, logger: logger, properties: properties, callers: callers))
        connection.export(calls, at: BrokerNames.objectPath)
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
        if connection.isConnected {
            // Every caller gets an answer: new calls are refused, those in flight finish (or are
            // cancelled and answered once the grace period is over, or at a second signal). The
            // name goes only then, so a successor never loads the state while a change is in flight.
            await calls.stop(grace: options.stopGracePeriod, hurry: { _ = await stop.next() },
                             endSignIns: { await broker.callerLeft($0) }, logger: logger)
            // A round trip after the last reply: once ReleaseName is answered, every reply is on the bus.
            _ = try? await connection.releaseName(BrokerNames.busName)
        }
        logger.info("stopped")
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

    /// The bus whose activation started brokerd (`DBUS_STARTER_ADDRESS`), unless that is the
    /// system bus: a D-Bus-activated broker serves the bus that asked for it, even when its
    /// environment names no session bus (`DBUS_SESSION_BUS_ADDRESS` is the fallback).
    static func activationBusAddress() -> String? {
        guard let address = getenv("DBUS_STARTER_ADDRESS"), address.pointee != 0 else { return nil }
        if let type = getenv("DBUS_STARTER_BUS_TYPE"), String(cString: type) == "system" { return nil }
        return String(cString: address)
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

/// The pipe SIGTERM and SIGINT are written to by ``StopRequests``'s handler (its write end).
nonisolated(unsafe) private var stopSignalPipe: Int32 = -1

/// SIGTERM, SIGINT or the loss of the bus: the reasons brokerd stops. Installed before the
/// bus name is taken, so a stop request that comes right after start-up is never lost.
///
/// The handler is brokerd's own (`sigaction`, in place when `init` returns): it writes the
/// signal's number to a pipe, which a read source turns into a reason. A dispatch signal source
/// alone is not enough on Linux: it installs its handler asynchronously, on the dispatch manager
/// thread, and a signal that comes before that (the disposition being SIG_IGN meanwhile) is lost.
/// `@unchecked`: its stored properties are set once; `next()` is awaited by one task at a time.
final class StopRequests: @unchecked Sendable {
    private let reasons: AsyncStream<String>
    private let continuation: AsyncStream<String>.Continuation
    private let source: (any DispatchSourceRead)?
    private let watcher: Task<Void, Never>

    init(_ connection: DBusConnection) {
        signal(SIGPIPE, SIG_IGN)
        let (reasons, continuation) = AsyncStream<String>.makeStream()
        self.reasons = reasons
        self.continuation = continuation
        var ends: [Int32] = [-1, -1]
        if stopSignalPipe < 0, pipe(&ends) == 0 {
            for end in ends {
                _ = fcntl(end, F_SETFD, FD_CLOEXEC)
                _ = fcntl(end, F_SETFL, O_NONBLOCK)   // the handler never blocks; the reader drains
            }
            stopSignalPipe = ends[1]
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(stopSignalPipe, &byte, 1)
                errno = saved
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(SIGTERM, &action, nil)
            sigaction(SIGINT, &action, nil)
            let readEnd = ends[0]
            let source = DispatchSource.makeReadSource(fileDescriptor: readEnd, queue: .global())
            source.setEventHandler {
                var bytes = [UInt8](repeating: 0, count: 16)
                while true {
                    let count = bytes.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
                    guard count > 0 else { break }
                    for byte in bytes[..<count] { continuation.yield(Int32(byte) == SIGINT ? "SIGINT" : "SIGTERM") }
                }
            }
            source.resume()
            self.source = source
        } else {
            // Not expected (one StopRequests per process); the default action still ends brokerd.
            self.source = nil
        }
        watcher = Task {
            await connection.waitUntilDisconnected()
            continuation.yield("the bus connection was lost")
        }
    }

    deinit {
        watcher.cancel()
        source?.cancel()
        continuation.finish()
    }

    /// Waits for the first reason to stop.
    func next() async -> String {
        for await reason in reasons { return reason }
        return "stopped"
    }
}
