import BrokerCore
import DBus
import FoundationEssentials
import Locking
import Logging

/// Start-up: where tokens go, checked before the broker serves anyone.
package enum TokenStorageSetup {
    /// Returns the store the broker writes through, the state it starts with (`loaded`, the
    /// state file's content, with the tokens kept elsewhere merged in) and, when the keyring that
    /// holds the tokens is locked, what waits for it to open.
    ///
    /// - `plaintextFile`: the file store itself, with a warning.
    /// - `memory`: tokens are never written, with a warning.
    /// - `secretService`: refuses (throws) when no Secret Service is on the bus, neither running
    ///   nor activatable: never a silent fallback. A locked default keyring (automatic login)
    ///   does not stop the start: the state comes without its tokens, and the broker refuses
    ///   token calls until ``LockedKeyring`` sees the keyring unlocked.
    ///
    /// A state file that still holds tokens (written with `plaintext-file`, or access tokens
    /// of a version 1 file) is rewritten at once without them, after the refresh tokens are in the
    /// vault (`secretService`) or in memory (`memory`).
    package static func open(
        _ storage: TokenStorage, origin: TokenStorageOrigin = .builtIn, files: FileStateStore, loaded: BrokerState,
        busAddress: String?,
        logger: Logger
    ) throws(StorageSetupError) -> (store: any StateStore, state: BrokerState, locked: LockedKeyring?) {
        let fileHeldTokens = TokenProtectingStore.hasTokens(loaded) || (files.loadReport?.droppedAccessTokens ?? 0) > 0
        if let report = files.loadReport {
            logger.debug(
                "loaded the state file",
                metadata: [
                    "file": "\(files.path)", "format": "\(report.version)", "bytes": "\(report.bytes)",
                    "clients": "\(report.clients)", "journalLines": "\(report.journalLines)",
                    "journalBytes": "\(report.journalBytes)", "ms": "\(report.milliseconds)",
                ])
            if let failure = report.purgeFailure {
                logger.error(
                    "could not write the snapshot that takes a secret the state no longer holds out of its files",
                    metadata: ["file": "\(files.path)", "error": "\(failure)"])
            }
            if report.droppedAccessTokens > 0 {
                logger.info(
                    Logger.Message(
                        stringLiteral:
                            "the state file held access tokens (format \(report.version)), which are no longer "
                            + "kept at rest: dropped; each app's next silent call refreshes them with its refresh token"
                    ),
                    metadata: ["file": "\(files.path)", "accessTokens": "\(report.droppedAccessTokens)"])
            }
        }
        switch storage {
        case .plaintextFile:
            logger.warning(
                Logger.Message(
                    stringLiteral:
                        "tokens are stored in plaintext in the state file (\(origin.naming(.plaintextFile))): "
                        + "any program running as this user can read them; use the Secret Service "
                        + "(secret-service) where there is one"),
                metadata: ["file": "\(files.path)"])
            return (files, loaded, nil)
        case .memory:
            logger.warning(
                Logger.Message(
                    stringLiteral:
                        "tokens are kept in memory only (\(origin.naming(.memory))): they are lost when brokerd "
                        + "stops, and every app must then sign in interactively again"))
            let store = TokenProtectingStore(file: files, vault: nil, inVault: nil, logger: logger)
            try removeTokensFromFile(store, fileHeldTokens: fileHeldTokens, state: loaded, to: "memory", logger: logger)
            return (store, loaded, nil)
        case .secretService:
            let connection: DBusConnection
            do {
                connection =
                    try busAddress.map { try DBusConnection(address: $0, logger: logger) }
                    ?? DBusConnection.sessionBus(logger: logger)
            } catch {
                throw StorageSetupError.bus("cannot connect to the session bus to reach the Secret Service: \(error)")
            }
            let service = SecretService(connection: connection, origin: origin)
            let available: Bool
            do { available = try service.isAvailable() } catch { throw StorageSetupError.bus("\(error)") }
            guard available else {
                throw StorageSetupError.configuration(
                    "no Secret Service (\(SecretService.busName)) is running on the session bus or can be started by "
                        + "it, so refresh tokens have nowhere safe to go (\(origin.naming(.secretService))). "
                        + "Start one (gnome-keyring-daemon, KeePassXC, KWallet), \(origin.alternatives)")
            }
            let vault = SecretServiceVault(service: service)
            let tokens: StoredTokens?
            let known: StoredTokens?
            do {
                tokens = try vault.load(deviceId: loaded.deviceId)
                known = tokens ?? StoredTokens()
            } catch SecretServiceError.locked(let why) where !fileHeldTokens {
                // Until it opens, the broker writes the state file only: nothing it holds then is a
                // token (it refuses token calls), so the vault, said to hold nothing, is not touched.
                let store = TokenProtectingStore(file: files, vault: vault, inVault: StoredTokens(), logger: logger)
                logger.warning(
                    "the keyring is locked: accounts are served, tokens once it is unlocked",
                    metadata: ["why": "\(why)"])
                return (store, loaded, LockedKeyring(service: service, vault: vault, store: store, message: why))
            } catch VaultError.unreadable(let why) {
                // Like a damaged state file: start without those tokens (apps sign in again); the next save replaces
                // the item.
                logger.error("the stored tokens cannot be used; starting without them", metadata: ["why": "\(why)"])
                (tokens, known) = (nil, nil)
            } catch {
                throw StorageSetupError.state("cannot read the tokens from the Secret Service: \(error)")
            }
            // An item of format 1 still holds access tokens: unknown content, so the save below rewrites it without
            // them.
            let vaultHeldAccessTokens = (tokens?.droppedAccessTokens ?? 0) > 0
            let store = TokenProtectingStore(
                file: files, vault: vault, inVault: vaultHeldAccessTokens ? nil : known, logger: logger)
            let state = TokenProtectingStore.merge(loaded, with: tokens, logger: logger)
            try removeTokensFromFile(
                store, fileHeldTokens: fileHeldTokens, state: state, to: "the Secret Service", logger: logger)
            if vaultHeldAccessTokens && !fileHeldTokens {
                // Not worth refusing to start over: they expire soon, and the next token change rewrites the item.
                do { try store.save(state) } catch {
                    logger.warning(
                        "the Secret Service item still holds access tokens of format 1; rewriting it failed",
                        metadata: ["error": "\(error)"])
                }
            }
            logger.info("tokens are stored in the Secret Service", metadata: ["service": "\(SecretService.busName)"])
            return (store, state, nil)
        }
    }

    /// Moves the tokens a `plaintext-file` run left in the state file to where they go now, and
    /// makes the file without them durable.
    private static func removeTokensFromFile(
        _ store: TokenProtectingStore, fileHeldTokens: Bool, state: BrokerState,
        to destination: String, logger: Logger
    ) throws(StorageSetupError) {
        guard fileHeldTokens else { return }
        do {
            try store.save(state)
            try store.sync()
        } catch {
            throw StorageSetupError.state(
                "the state file holds tokens from a plaintext-file run, and moving them to \(destination) failed: "
                    + "\(error)"
            )
        }
        logger.notice("moved the tokens out of the state file", metadata: ["to": "\(destination)"])
    }
}

/// Why the token storage could not be set up at start; brokerd stops with it (as its
/// `DaemonError` of the same kind).
public enum StorageSetupError: Error, CustomStringConvertible {
    /// A setting that cannot work (a storage this machine lacks).
    case configuration(String)
    /// What is kept could not be read.
    case state(String)
    /// The session bus (the Secret Service's) could not be used.
    case bus(String)

    public var description: String {
        switch self {
        case .configuration(let why), .state(let why), .bus(let why): why
        }
    }
}
