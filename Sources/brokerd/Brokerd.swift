import ArgumentParser
import BrokerCore
import BrokerDaemon
import BrokerPersistence
import Glibc
import Logging
import TaskPool

/// brokerd: the shared-device identity broker on the D-Bus session bus.
@main
struct Brokerd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "brokerd",
        abstract: "The shared-device identity broker: owns the device's signed-in account on the D-Bus session bus.",
        discussion: """
            brokerd serves io.shareddevice.Broker1 at /io/shareddevice/Broker1 on the bus in \
            DBUS_SESSION_BUS_ADDRESS. It prints one line starting with "brokerd ready:" on standard \
            output once it answers calls, logs to standard error, and stops cleanly on SIGTERM or SIGINT.

            Example:
              brokerd --device-mode shared --authority https://login.example/TENANT/v2.0
            """,
        version: Daemon.version)

    @Option(help: "shared: one account for the whole device; default: one account per app.")
    var deviceMode: DeviceMode?

    @Option(help: "The OpenID Connect authority (issuer) URL. HTTPS, or http://127.0.0.1 for a local provider.")
    var authority: String?

    @Option(
        help: ArgumentHelp(
            "Where the state lives (default: $XDG_STATE_HOME/shared-device-broker or "
                + "~/.local/state/shared-device-broker).")
    )
    var stateDir: String?

    @Option(help: "A JSON configuration file (device mode, authority, tenant, allowed clients). Flags win over it.")
    var config: String?

    @Option(
        help: ArgumentHelp(
            "An administrator's configuration to use when \(DaemonConfigurationFile.administratorPath) does not exist "
                + "(it must exist and belong to root): a way to try one without writing to /etc.",
            discussion:
                "The administrator's file wins over --config and over the flags: its device mode is the device's."))
    var adminConfig: String?

    @Option(help: "The bus address to serve on, instead of DBUS_SESSION_BUS_ADDRESS.")
    var address: String?

    @Option(
        help: ArgumentHelp(
            "Where tokens are kept between runs: secret-service (the default), plaintext-file or memory.",
            discussion: """
                secret-service: the desktop's Secret Service (org.freedesktop.secrets); without one on the bus, running \
                or one the bus can start, brokerd refuses to start; with its default keyring locked or missing it \
                starts, and token calls get StorageLocked until the keyring opens. plaintext-file: in state.json (0600), readable by any program running as you. memory: \
                never written; after a restart apps must sign in again. The last two log a warning at start.
                """))
    var tokenStorage: TokenStorage?

    @Flag(
        help: ArgumentHelp(
            "Let a password sign-in use the resource-owner password grant where the provider offers no native "
                + "authentication (deprecated by RFC 9700; config allowPasswordGrant)."))
    var allowPasswordGrant = false

    @Option(
        name: .customLong("compat"),
        help: ArgumentHelp(
            "Also serve another broker's protocol over the same state: microsoft-broker1 (repeatable; config "
                + "compatibility).",
            discussion: """
                microsoft-broker1: Microsoft's Linux identity broker (com.microsoft.identity.broker1), for apps written \
                for it (Edge, Teams, the OneDrive client, MSAL Python). If another program owns that name, brokerd \
                logs who and serves its own interface only.
                """))
    var compatibility: [CompatibilityProtocol] = []

    @Option(help: "Seconds a person has to finish an interactive sign-in in the browser.")
    var interactiveTimeout: Int = 300

    @Option(help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .info

    func run() async throws {
        let level = logLevel
        let journal = JournalLogHandler.standardErrorIsJournal
        LoggingSystem.bootstrap { label in
            if journal {
                var handler = JournalLogHandler(label: label)
                handler.logLevel = level
                return EscapingLogHandler(handler)
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return EscapingLogHandler(handler)
        }
        let logger = Logger(label: "brokerd")
        // Said at every start, so that a toolchain that stops using TaskPool fails the test that
        // reads it (ExecutorTests) rather than a kiosk's battery. Not fatal: brokerd still works.
        if let problem = await TaskPool.checkInstalled() {
            logger.critical("\(problem)")
        } else {
            logger.debug("tasks run on TaskPool's threads")
        }
        do {
            let user =
                try config.map { path throws(DaemonError) in try DaemonConfigurationFile.load(path: path) }
                ?? DaemonConfigurationFile()
            let administratorFile = try DaemonConfigurationFile.loadAdministratorFile(fallback: adminConfig)
            let administrator = administratorFile?.file
            if let adminConfig, let used = administratorFile?.path, used != adminConfig {
                logger.warning(
                    "--admin-config is ignored: the administrator's file exists and is the one read",
                    metadata: ["ignored": "\(adminConfig)", "read": "\(used)"])
            }
            // Which files were read, in the order their settings win: what an administrator checks first.
            logger.info(
                "configuration",
                metadata: [
                    "administrator":
                        "\(administratorFile?.path ?? "none (\(DaemonConfigurationFile.administratorPath))")",
                    "user": "\(config ?? "none")",
                    "order": "the administrator's file, then the command line, then the user's file",
                ])
            var file = user.overridden(by: administrator)
            if let fixed = administrator?.deviceMode, let asked = deviceMode, asked != fixed {
                logger.warning(
                    "the administrator's configuration sets the device mode; --device-mode is ignored",
                    metadata: ["administrator": "\(fixed.rawValue)", "asked": "\(asked.rawValue)"])
            }
            if administrator?.authority != nil, authority != nil {
                logger.warning("the administrator's configuration sets the authority; --authority is ignored")
            }
            if let fixed = administrator?.tokenStorage, let asked = tokenStorage, asked != fixed {
                logger.warning(
                    "the administrator's configuration sets the token storage; --token-storage is ignored",
                    metadata: ["administrator": "\(fixed.rawValue)", "asked": "\(asked.rawValue)"])
            }
            file.tokenStorage = administrator?.tokenStorage ?? tokenStorage ?? file.tokenStorage
            // Advice about a setting names where it was set: a flag the administrator's file overrides is no fix.
            let tokenStorageOrigin: TokenStorageOrigin =
                if let path = administratorFile?.path, administrator?.tokenStorage != nil {
                    .file(path)
                } else if tokenStorage != nil {
                    .flag
                } else if let config, user.tokenStorage != nil {
                    .file(config)
                } else {
                    .builtIn
                }
            file.allowPasswordGrant =
                administrator?.allowPasswordGrant ?? (allowPasswordGrant || file.allowPasswordGrant == true)
            file.compatibility =
                administrator?.compatibility
                ?? CompatibilityProtocol.allCases.filter {
                    compatibility.contains($0) || user.compatibility?.contains($0) == true
                }
            // Without one the broker still starts: a fresh install activated by an app must answer
            // it (device mode, and an error that names the file to edit), not exit with a status.
            let authority = administrator?.authority ?? authority ?? file.authority
            let authorityOrigin =
                if let path = administratorFile?.path, administrator?.authority != nil {
                    "authority in \(path)"
                } else if self.authority != nil {
                    "--authority"
                } else {
                    "authority in \(config ?? "the configuration file")"
                }
            var options = DaemonOptions(
                deviceMode: administrator?.deviceMode ?? deviceMode ?? file.deviceMode ?? .shared, authority: authority,
                stateDirectory: stateDir ?? DaemonOptions.defaultStateDirectory(), configuration: file,
                busAddress: address, interactiveTimeout: .seconds(max(1, interactiveTimeout)))
            options.tokenStorageOrigin = tokenStorageOrigin
            options.authorityOrigin = authorityOrigin
            let status = try await Daemon.run(options, logger: logger)
            throw ExitCode(status)
        } catch let error as DaemonError {
            Console.printError("brokerd: \(error)")
            StartFailure.record("brokerd: \(error)", status: 1)
            throw ExitCode(1)
        }
    }

    /// ArgumentParser's, but a command line brokerd cannot use is also recorded where the client
    /// library reads why the broker did not start (``StartFailure``): started by the bus, brokerd's
    /// standard error reaches nobody.
    ///
    /// Its tasks run on ``TaskPool`` rather than libdispatch, whose pool wakes the process every
    /// second: an idle brokerd sleeps until a call, a signal or a timer it armed.
    static func main() {
        TaskPool.runMain(threads: TaskPool.defaultWidth) {
            do {
                var command = try parseAsRoot()
                if var asyncCommand = command as? AsyncParsableCommand {
                    try await asyncCommand.run()
                } else {
                    try command.run()
                }
                return 0
            } catch {
                let status = exitCode(for: error).rawValue
                if status == 64 {
                    StartFailure.record("brokerd: \(message(for: error))", status: status)
                }
                exit(withError: error)
            }
        }
    }
}

extension DeviceMode: ExpressibleByArgument {}
extension TokenStorage: ExpressibleByArgument {}
extension CompatibilityProtocol: ExpressibleByArgument {}
// --log-level reads straight into swift-log's level; neither package will declare this conformance.
// swift-format-ignore: AvoidRetroactiveConformances
extension Logger.Level: @retroactive ExpressibleByArgument {}
