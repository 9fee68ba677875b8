import BrokerCore
import BrokerPersistence
import DBus
import Glibc
import HTTP
import Identity
import Logging

/// brokerd: the broker on the session bus, from start to a clean stop.
public enum Daemon {
    public static let version = BrokerRelease.version

    /// Starts the broker, serves until SIGTERM/SIGINT or until the bus goes away, and returns
    /// the process exit status.
    public static func run(_ options: DaemonOptions, logger: Logger) async throws(DaemonError) -> Int32 {
        var daemon = try await RunningDaemon.start(options, logger: logger)
        let reason = await daemon.serving.stopRequests.next()
        logger.info("stopping", metadata: ["reason": "\(reason)"])
        await daemon.stop()
        logger.info("stopped")
        return 0
    }
}

/// A started brokerd: what its start set going, in the order it did, and the one `stop()` that
/// ends it. Each part is started by a function of its own; one that fails ends what the parts
/// before it started, and its error is the start failure brokerd reports.
struct RunningDaemon {
    let options: DaemonOptions
    let logger: Logger
    let storage: Storage
    let connection: DBusConnection
    let provider: Provider
    let service: BrokerService
    /// What watches the desktop and the keyring; nil once stopped.
    private(set) var watches: Watches?
    let serving: Serving
    let providerWork: ProviderWork

    /// The state file and where the tokens go, opened before anything else.
    struct Storage {
        let files: FileStateStore
        let tokens: any StateStore
        let initialState: BrokerState
        let lockedKeyring: LockedKeyring?
    }

    /// The identity provider: OpenID Connect at the configured authority, or none yet (`oidc` nil).
    struct Provider {
        /// What the core calls.
        let identity: any IdentityProvider
        /// The same provider when an authority is configured: discovery, Shared Signals and the
        /// stop of its HTTP client need it.
        let oidc: OIDCProvider?
        let authority: Authority?
    }

    /// What listens to the desktop (the screen lock, the person's inactivity and its notice) and
    /// waits for a keyring locked at start; they run until the stop.
    struct Watches {
        let lockWatch: ScreenLockWatch?
        let notice: SignOutNotice?
        let idleWatch: (any IdleSource)?
        let keyringWatch: Task<Void, Never>?
    }

    /// The exported interfaces, their names owned, and what stops them.
    struct Serving {
        let calls: CallGate
        let microsoftCalls: CallGate?
        let departures: Task<Void, Never>
        let stopRequests: StopRequests
    }

    /// Provider requests brokerd makes on its own once it serves: revocations a previous run owed,
    /// the discovery at start, the provider's word that a session ended.
    struct ProviderWork {
        let owed: Task<Void, Never>
        let discovery: Task<Void, Never>?
        let providerSignals: [Task<Void, Never>]
    }

    // MARK: Start

    static func start(_ options: DaemonOptions, logger: Logger) async throws(DaemonError) -> RunningDaemon {
        var options = options
        // Started by D-Bus activation: serve the bus that started us.
        if options.busAddress == nil { options.busAddress = Daemon.activationBusAddress() }
        let authority: Authority?
        do { authority = try options.authority.map(Authority.init) } catch {
            throw DaemonError.configuration("\(options.authorityOrigin) (\(options.authority ?? "")): \(error)")
        }
        try options.configuration.checkSettingsTakeEffect()
        let storage = try openStorage(options, logger: logger)
        let connection = try connect(options, logger: logger)
        var watches: Watches?
        do throws(DaemonError) {
            let clock = SystemClock()
            let cleaner = try HomeCleaner(
                listed: options.configuration.clearOnSignOut ?? [],
                home: getenv("HOME").map { String(cString: $0) } ?? "", keeping: [storage.files.directory],
                logger: logger)
            let provider = try chooseProvider(
                options, authority: authority, connection: connection, clock: clock, logger: logger)
            // Read before anything is served: a transmitter or a secret file that cannot be used stops the start.
            let sharedSignals = try options.configuration.sharedSignals?.settings(
                deviceId: storage.initialState.deviceId)
            if sharedSignals != nil, provider.oidc == nil {
                throw DaemonError.configuration(
                    "sharedSignals is set but no authority is: the broker's Shared Signals client gets its token from "
                        + "the authority; set authority too")
            }
            let service = makeService(
                options, storage: storage, provider: provider, cleaner: cleaner, connection: connection, clock: clock,
                logger: logger)
            watches = try await startWatches(
                options, service: service, storage: storage, provider: provider, connection: connection,
                clock: clock, logger: logger)
            let serving = try await serve(options, service: service, connection: connection, logger: logger)
            announceReady(options, provider: provider, storage: storage, connection: connection, logger: logger)
            let providerWork = startProviderWork(
                options, provider: provider, sharedSignals: sharedSignals, broker: service.broker, logger: logger)
            return RunningDaemon(
                options: options, logger: logger, storage: storage, connection: connection, provider: provider,
                service: service, watches: watches, serving: serving, providerWork: providerWork)
        } catch {
            watches?.keyringWatch?.cancel()
            watches = nil
            connection.close()
            throw error
        }
    }

    /// Opens the state directory and the token storage `--token-storage` says (the Secret Service
    /// by default, never silently elsewhere), and writes a new device's state.
    static func openStorage(_ options: DaemonOptions, logger: Logger) throws(DaemonError) -> Storage {
        let files: FileStateStore
        do { files = try FileStateStore(directory: options.stateDirectory) } catch {
            throw DaemonError.state("cannot use the state directory: \(error)")
        }
        let loaded = try Daemon.loadState(files, logger: logger)
        let opened: (store: any StateStore, state: BrokerState, locked: LockedKeyring?)
        do {
            opened = try TokenStorageSetup.open(
                options.configuration.tokenStorage ?? .secretService, origin: options.tokenStorageOrigin, files: files,
                loaded: loaded ?? BrokerState(deviceId: Broker.newDeviceId()),
                busAddress: options.busAddress, logger: logger)
        } catch {
            switch error {
            case .configuration(let why): throw DaemonError.configuration(why)
            case .state(let why): throw DaemonError.state(why)
            case .bus(let why): throw DaemonError.bus(why)
            }
        }
        // A new device's state is written once the start can go on: its deviceId is the device's
        // from the first start, whether or not anything else is ever written.
        if loaded == nil {
            do {
                try opened.store.save(opened.state)
                try opened.store.sync()
            } catch {
                logger.warning(
                    "the new device id could not be written; it is kept with the first change",
                    metadata: ["error": "\(error)"])
            }
        }
        return Storage(files: files, tokens: opened.store, initialState: opened.state, lockedKeyring: opened.locked)
    }

    /// The session bus brokerd serves (or the one `--bus-address` names).
    static func connect(_ options: DaemonOptions, logger: Logger) throws(DaemonError) -> DBusConnection {
        do {
            return try options.busAddress.map { try DBusConnection(address: $0, logger: logger) }
                ?? DBusConnection.sessionBus(logger: logger)
        } catch {
            throw DaemonError.bus("cannot connect to the session bus: \(error)")
        }
    }

    /// OpenID Connect at `authority`, or the stand-in that answers NotConfigured until one is set.
    static func chooseProvider(
        _ options: DaemonOptions, authority: Authority?, connection: DBusConnection, clock: SystemClock,
        logger: Logger
    ) throws(DaemonError) -> Provider {
        guard let authority else {
            logger.warning("\(UnconfiguredProvider.remedy); until then sign-ins and tokens get NotConfigured")
            return Provider(identity: UnconfiguredProvider(), oidc: nil, authority: nil)
        }
        let oidc = OIDCProvider(
            authority: authority, http: HTTPClient(idleRelease: Daemon.httpIdleRelease()), clock: clock,
            logger: logger,
            clientSecrets: try options.configuration.clientSecrets(), tenantId: options.configuration.tenantId ?? "",
            allowPasswordGrant: options.configuration.allowPasswordGrant == true,
            clientCapabilities: options.configuration.clientCapabilities ?? [],
            urlOpener: DesktopPortal(connection: connection, fallback: BrowserCommand(), logger: logger),
            loopbackRedirectPorts: options.configuration.loopbackRedirectPorts?.range,
            phoneApprovalLoginHint: options.configuration.phoneApprovalLoginHint ?? .plain)
        return Provider(identity: oidc, oidc: oidc, authority: authority)
    }

    /// The core and what every interface shares, from the options and the state opened.
    static func makeService(
        _ options: DaemonOptions, storage: Storage, provider: Provider, cleaner: HomeCleaner,
        connection: DBusConnection, clock: SystemClock, logger: Logger
    ) -> BrokerService {
        let configuration = options.configuration
        return BrokerService(
            configuration: BrokerConfiguration(
                deviceMode: options.deviceMode, brokerVersion: Daemon.version, tenantId: configuration.tenantId ?? "",
                knownClientIds: configuration.clients.map { Set($0.map(\.clientId)) },
                extraDeviceInformation: Daemon.deviceFacts(), interactiveTimeout: options.interactiveTimeout,
                browserSignOut: configuration.browserSignOut,
                maxClients: configuration.maxClients ?? BrokerConfiguration.defaultMaxClients,
                providerNotConfigured: provider.authority == nil ? UnconfiguredProvider.remedy : nil,
                bootId: Daemon.bootId(),
                signOutAfterReboot: configuration.signOutAfterReboot == true,
                idleSignOut: configuration.idleSignOutSeconds.flatMap { seconds in
                    seconds > 0
                        ? IdleSignOut(after: Int64(seconds), warning: Int64(configuration.idleWarningSeconds ?? 60))
                        : nil
                }, defaultScopes: configuration.defaultScopes()),
            provider: provider.identity, store: storage.tokens, clock: clock, initialState: storage.initialState,
            cleaner: cleaner, channel: connection,
            callers: CallerPolicy(
                connection: connection, allowedExecutables: configuration.allowedExecutables(), logger: logger),
            logger: logger)
    }

    /// What must be settled before anyone is served: a locked keyring, a sign-in of an earlier boot,
    /// a clean-up or an inactivity deadline a killed run left; then the desktop's watches.
    static func startWatches(
        _ options: DaemonOptions, service: BrokerService, storage: Storage, provider: Provider,
        connection: DBusConnection, clock: SystemClock, logger: Logger
    ) async throws(DaemonError) -> Watches {
        let broker = service.broker
        // Before anyone can call: token calls wait for a keyring locked at start.
        if let keyring = storage.lockedKeyring { broker.tokenStorageLocked(keyring.message) }
        // Before anyone is served: a sign-in made before the device restarted ends now.
        let rebooted: Task<SignOutOutcome, Never>?
        do { rebooted = try await broker.endShiftIfRebooted() } catch {
            throw DaemonError.state("cannot sign out the sign-in of an earlier boot: \(error.message)")
        }
        if rebooted != nil { logger.notice("signed out: the device restarted since the sign-in (signOutAfterReboot)") }
        // A sign-out's clean-up a killed run left undone (or the reboot's own), before anyone is served.
        await broker.cleanUpOwed()
        let lockWatch = await Daemon.watchScreenLock(options, connection: connection, broker: broker, logger: logger)
        // Before any warning, a resumed one too: the person is told of each.
        let notice =
            options.deviceMode == .shared && options.configuration.idleSignOutSeconds ?? 0 > 0
            ? await SignOutNotice.start(session: connection, service: service, clock: clock, logger: logger) : nil
        // A warning a killed run left: kept, or its sign-out done now, before anyone is served.
        let lapsed: Task<SignOutOutcome?, Never>?
        do { lapsed = try await broker.resumeIdleDeadline() } catch {
            throw DaemonError.state("cannot resume the inactivity deadline: \(error.message)")
        }
        _ = await lapsed?.value
        let idleWatch = await Daemon.watchInactivity(options, connection: connection, service: service, logger: logger)
        if provider.authority == nil {
            broker.setDeviceFact(DeviceFact.providerNotConfigured, to: UnconfiguredProvider.remedy)
        }
        let keyringWatch = storage.lockedKeyring.map { keyring in
            Task { await keyring.serveWhenUnlocked(broker, logger: logger) }
        }
        return Watches(lockWatch: lockWatch, notice: notice, idleWatch: idleWatch, keyringWatch: keyringWatch)
    }

    /// Exports the interfaces, then owns their names: brokerd's last, so that "started" (systemd's
    /// Type=dbus, the readiness line) means every name it serves is there.
    static func serve(
        _ options: DaemonOptions, service: BrokerService, connection: DBusConnection, logger: Logger
    ) async throws(DaemonError) -> Serving {
        let groups: @Sendable (String) async -> CallerGroups = { [callers = service.callers] sender in
            await callers.groups(ofCaller: sender)
        }
        let calls = CallGate(
            BrokerObject(service: service, logger: logger), neverRefusedForLoad: BrokerObject.neverRefusedForLoad,
            groups: groups)
        connection.export(calls, at: BrokerNames.objectPath)
        // Exported before any name is owned: clients call as soon as a name appears.
        let compatibility = options.configuration.compatibility ?? []
        let microsoftCalls =
            compatibility.contains(.microsoftBroker1)
            ? CallGate(
                MicrosoftBroker1Object(service: service, logger: logger),
                neverRefusedForLoad: MicrosoftBroker1Object.neverRefusedForLoad, groups: groups) : nil
        if let microsoftCalls { connection.export(microsoftCalls, at: MicrosoftBroker1Names.objectPath) }
        let departures = try await Daemon.watchDepartures(connection, service: service)
        // Catch SIGTERM/SIGINT before anyone can know we are here.
        let stopRequests = StopRequests(connection)
        if microsoftCalls != nil {
            await Daemon.serveCompatibility(
                MicrosoftBroker1Names.busName, on: connection, service: service, logger: logger)
        }
        do throws(DaemonError) {
            let reply: DBusConnection.RequestNameReply
            do { reply = try await connection.requestName(BrokerNames.busName) } catch {
                throw DaemonError.bus("cannot request the name \(BrokerNames.busName): \(error)")
            }
            guard reply == .primaryOwner else {
                throw DaemonError.bus(
                    "the name \(BrokerNames.busName) is already taken on this bus: is another brokerd running?")
            }
        } catch {
            departures.cancel()
            throw error
        }
        return Serving(
            calls: calls, microsoftCalls: microsoftCalls, departures: departures, stopRequests: stopRequests)
    }

    /// Says that brokerd serves: the log, a start failure recorded earlier cleared, and the
    /// readiness line scripts and tests wait for.
    static func announceReady(
        _ options: DaemonOptions, provider: Provider, storage: Storage, connection: DBusConnection, logger: Logger
    ) {
        logger.info(
            "serving",
            metadata: [
                "mode": "\(options.deviceMode.rawValue)",
                "authority": "\(provider.authority.map { "\($0)" } ?? "none")", "state": "\(storage.files.path)",
            ])
        StartFailure.clear()
        Console.printLine(
            "brokerd ready: \(BrokerNames.busName) as \(connection.uniqueName), device mode "
                + "\(options.deviceMode.rawValue)"
        )
    }

    /// Starts what brokerd asks the provider on its own, once it serves (never holding up its start).
    static func startProviderWork(
        _ options: DaemonOptions, provider: Provider, sharedSignals: SharedSignalsSettings?, broker: Broker,
        logger: Logger
    ) -> ProviderWork {
        // Revocations a previous run owed the provider (it was killed, or the provider was down).
        let owed = Task { await broker.resumePendingRevocations() }
        let discovery = Daemon.discoverAtStart(provider.oidc, broker: broker, logger: logger)
        let providerSignals = Daemon.listenToProvider(
            options, sharedSignals: sharedSignals, oidc: provider.oidc, broker: broker, logger: logger)
        return ProviderWork(owed: owed, discovery: discovery, providerSignals: providerSignals)
    }

    // MARK: Stop

    /// Ends what the start set going, in this order: every caller answered and the names released
    /// (while the provider can still be reached, for calls in flight); every provider request
    /// ended; the journal folded into state.json; the watches; the bus connection.
    mutating func stop() async {
        await finishCalls()
        // Every provider request ends before the process does: exit tears libcurl and its TLS
        // library down, and a transfer still on the HTTP thread then crashes the process (status
        // 139 seen once, stopped right after start with the start's discovery under way). The
        // HTTP client stops first, as a request of a shared read (discovery) is not the
        // cancelled task's own; revocations not confirmed stay owed.
        let tasks = [providerWork.owed] + (providerWork.discovery.map { [$0] } ?? []) + providerWork.providerSignals
        for task in tasks { task.cancel() }
        await provider.oidc?.stop()
        for task in tasks { await task.value }
        // state.json alone then holds the state: what an older brokerd, which reads no journal, needs.
        do { try storage.files.compact() } catch {
            logger.warning("could not fold the state journal into state.json", metadata: ["error": "\(error)"])
        }
        serving.departures.cancel()
        watches?.keyringWatch?.cancel()
        watches = nil
        connection.close()
    }

    /// Every caller gets an answer: new calls are refused, those in flight finish (or are
    /// cancelled and answered once the grace period is over, or at a second signal). The name
    /// goes only then, so a successor never loads the state while a change is in flight.
    private func finishCalls() async {
        guard connection.isConnected else { return }
        // A second SIGTERM or SIGINT hurries the stop of every interface's calls.
        let hurried = Latch()
        let secondSignal = Task { [stopRequests = serving.stopRequests] in
            _ = await stopRequests.next()
            hurried.open()
        }
        defer { secondSignal.cancel() }
        let grace = options.stopGracePeriod
        let (service, logger) = (service, logger)
        let microsoftStopped = serving.microsoftCalls.map { gate in
            Task {
                await gate.stop(
                    grace: grace, hurry: { await hurried.wait() },
                    endSignIns: { await service.broker.callerLeft($0) }, logger: logger)
            }
        }
        await serving.calls.stop(
            grace: grace, hurry: { await hurried.wait() }, endSignIns: { await service.broker.callerLeft($0) },
            logger: logger)
        await microsoftStopped?.value
        // A round trip after the last reply: once ReleaseName is answered, every reply is on the bus.
        if serving.microsoftCalls != nil { _ = try? await connection.releaseName(MicrosoftBroker1Names.busName) }
        _ = try? await connection.releaseName(BrokerNames.busName)
    }
}

extension Daemon {
    /// Reads the provider's discovery document once brokerd serves (never holding up its start),
    /// so that a wrong authority is said at once, in the log and in the device information, rather
    /// than at the first sign-in as the wrong problem; the device information shows the last
    /// failure until a read succeeds.
    static func discoverAtStart(_ provider: OIDCProvider?, broker: Broker, logger: Logger) -> Task<Void, Never>? {
        guard let provider else { return nil }
        provider.observeDiscovery { failure in broker.setDeviceFact(DeviceFact.discoveryError, to: failure) }
        return Task {
            do { _ = try await provider.endpoints() } catch {
                logger.warning(
                    "the identity provider's discovery document could not be read",
                    metadata: ["authority": "\(provider.authority)", "why": "\(error)"])
            }
        }
    }

    /// How the provider's word that a session ended reaches the device: a Shared Signals stream
    /// (`sharedSignals`), a check of the device's sign-in (`sessionCheckSeconds`), or both.
    static func listenToProvider(
        _ options: DaemonOptions, sharedSignals: SharedSignalsSettings?, oidc: OIDCProvider?, broker: Broker,
        logger: Logger
    ) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        if let sharedSignals, let oidc {
            let pollSeconds =
                options.configuration.sharedSignals?.pollSeconds
                ?? DaemonConfigurationFile.SharedSignals.defaultPollSeconds
            broker.setDeviceFact(DeviceFact.sharedSignals, to: "\(sharedSignals.transmitter): connecting")
            tasks.append(
                SharedSignalsListener.start(
                    SharedSignalsReceiver(settings: sharedSignals, provider: oidc, logger: logger),
                    every: pollSeconds, broker: broker, logger: logger))
        }
        if let seconds = options.configuration.sessionCheckSeconds, seconds > 0 {
            if options.deviceMode == .shared {
                broker.setDeviceFact(DeviceFact.sessionCheck, to: "every \(seconds) s")
                tasks.append(SessionCheck.start(every: seconds, broker: broker, logger: logger))
            } else {
                logger.warning(
                    "sessionCheckSeconds is set, but checks the device's sign-in, which only shared mode has")
            }
        }
        return tasks
    }

    /// Owns another broker's name (its object is exported already). A name someone else owns
    /// stays theirs: brokerd says who has it and goes on serving its own interface.
    static func serveCompatibility(
        _ name: String, on connection: DBusConnection, service: BrokerService, logger: Logger
    ) async {
        do {
            if try await connection.requestName(name) == .primaryOwner {
                service.broker.setDeviceFact(DeviceFact.compatibility, to: name)
                logger.info("serving a compatibility interface", metadata: ["name": "\(name)"])
                return
            }
            let driver = BusDriver(connection)
            let owner = try await driver.getNameOwner(name, timeout: .seconds(5)).value
            let pid = try? await driver.getConnectionUnixProcessID(owner, timeout: .seconds(5)).value
            let program = pid.flatMap { try? FileBytes.read("/proc/\($0)/comm") }.map {
                String(decoding: $0.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
            }
            logger.warning(
                "another program owns the name; its apps keep talking to it, and brokerd serves its own interface only",
                metadata: [
                    "name": "\(name)", "owner": "\(owner)", "pid": "\(pid.map(String.init) ?? "?")",
                    "program": "\(program ?? "?")",
                ])
        } catch {
            logger.warning(
                "cannot own the name; brokerd serves its own interface only",
                metadata: ["name": "\(name)", "error": "\(error)"])
        }
    }

    /// Sign-ins and what the broker knows of a caller belong to its connection: when it leaves the bus, they go.
    static func watchDepartures(_ connection: DBusConnection, service: BrokerService) async throws(DaemonError) -> Task<
        Void, Never
    > {
        let changes: AsyncStream<DBusSignal>
        do {
            changes = try await connection.signals(matching: DBusNameOwnerChange.rule())
        } catch {
            throw DaemonError.bus("cannot watch the bus for callers leaving: \(error)")
        }
        return Task {
            for await change in changes {
                guard let change = DBusNameOwnerChange(change), change.name.hasPrefix(":"), change.newOwner == nil
                else { continue }
                await service.callerLeft(change.name)
            }
        }
    }

    /// Reads the saved state. A damaged or unsafe file is moved aside, never overwritten, and
    /// the broker starts signed out; a file from a newer brokerd stops the start.
    /// The saved state; nil for a new device (none saved, or an unusable one moved aside).
    static func loadState(_ store: FileStateStore, logger: Logger) throws(DaemonError) -> BrokerState? {
        do {
            return try store.load()
        } catch StoreError.newerFormat(let why) {
            throw DaemonError.state(
                "\(why). Refusing to start rather than lose it; run the newer brokerd, or move the file away.")
        } catch {
            let aside = store.quarantine()
            logger.error(
                "the saved state cannot be used; starting signed out",
                metadata: [
                    "why": "\(error)", "keptAt": "\(aside ?? "(could not move it)")",
                ])
            return nil
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

    /// `idleSignOutSeconds` (shared mode): the person's inactivity from the first idle source the
    /// desktop offers (``IdleSources``). Said at start, and in the device information, which one,
    /// or that there is none.
    static func watchInactivity(
        _ options: DaemonOptions, connection: DBusConnection, service: BrokerService, logger: Logger
    ) async -> (any IdleSource)? {
        let broker = service.broker
        guard let idle = await broker.configuration.idleSignOut, options.deviceMode == .shared else { return nil }
        let watch = await IdleSources.first(session: connection, idle: idle, service: service, logger: logger)
        if watch == nil {
            logger.warning(
                Logger.Message(
                    stringLiteral: "idleSignOutSeconds is set, but the desktop offers no idle source "
                        + "(\(IdleSources.offered)): the device is not signed out after inactivity"))
        }
        var source = watch?.source ?? "none found at start"
        if let name = watch?.busName {
            let owner = await SourceOwner.of(name, on: connection)
            source += ", " + owner.servedBy
            if !owner.installedBySystem {
                logger.warning(
                    Logger.Message(
                        stringLiteral: "the idle source \(name), \(owner.servedBy), is not a program the system "
                            + "installed (a file of root's that nobody else can write): an app that owns this name "
                            + "before the desktop can keep a person signed in. Start apps after the desktop "
                            + "(docs/kiosk.md, \"The end of a shift\")"))
            }
        }
        broker.setDeviceFact(DeviceFact.idleSource, to: source)
        return watch
    }

    /// `signOutOnLock` (shared mode): the screen lock ends the shift. Said at start, and in the
    /// device information, what the watch listens to, or that the desktop offers nothing.
    static func watchScreenLock(
        _ options: DaemonOptions, connection: DBusConnection, broker: Broker, logger: Logger
    ) async -> ScreenLockWatch? {
        guard options.configuration.signOutOnLock == true, options.deviceMode == .shared else { return nil }
        let watch = await ScreenLockWatch.start(session: connection, logger: logger) {
            do {
                try await broker.endShift(cause: .lock)
            } catch {
                logger.error(
                    "the screen was locked, but the device could not be signed out", metadata: ["error": "\(error)"])
            }
        }
        if watch.sources.isEmpty {
            logger.warning(
                Logger.Message(
                    stringLiteral: "signOutOnLock is set, but no screensaver (org.gnome.ScreenSaver, "
                        + "org.freedesktop.ScreenSaver) nor logind session is there now; a screensaver that starts "
                        + "later is heard"))
        }
        broker.setDeviceFact(
            DeviceFact.screenLock,
            to: watch.sources.isEmpty ? "none found at start" : watch.sources.joined(separator: ", "))
        return watch
    }

    /// How long brokerd keeps libcurl after its last request (its idle release); in a debug
    /// build, `BROKERD_HTTP_IDLE_RELEASE_MS` instead, so that a test need not wait a minute.
    static func httpIdleRelease() -> Duration {
        #if DEBUG
        if let text = getenv("BROKERD_HTTP_IDLE_RELEASE_MS").map({ String(cString: $0) }), let ms = Int(text), ms > 0 {
            return .milliseconds(ms)
        }
        #endif
        return HTTPClient.defaultIdleRelease
    }

    /// This boot's id (`/proc/sys/kernel/random/boot_id`); in a debug build only, the file
    /// `BROKERD_BOOT_ID_FILE` names instead, so that a test can be "another boot". Never in a
    /// release: any app of the user can set the bus's activation environment, and one that named
    /// a file of its own would keep a sign-in across a reboot (`signOutAfterReboot`).
    static func bootId() -> String? {
        var path = "/proc/sys/kernel/random/boot_id"
        #if DEBUG
        if let override = getenv("BROKERD_BOOT_ID_FILE") { path = String(cString: override) }
        #endif
        guard let bytes = try? FileBytes.read(path, limit: 4096) else { return nil }
        let id = String(decoding: bytes.prefix { $0 > 0x20 }, as: UTF8.self)
        return id.isEmpty ? nil : id
    }

    /// Host and OS facts for `extraDeviceInformation`.
    static func deviceFacts() -> [String: String] {
        var facts: [String: String] = [:]
        var names = utsname()
        if uname(&names) == 0 {
            facts["hostname"] = withUnsafeBytes(of: &names.nodename) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            facts["os"] = withUnsafeBytes(of: &names.sysname) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            facts["osVersion"] = withUnsafeBytes(of: &names.release) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
        }
        return facts
    }
}
