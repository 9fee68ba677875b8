import BrokerCore
import DBus
import Locking
import Logging

/// The keyring that holds the tokens was locked when brokerd started (a kiosk's automatic login
/// unlocks none). The broker serves accounts meanwhile and refuses token calls with
/// `StorageLocked`; this waits for the keyring to open, on the Secret Service's own signals (and
/// a look every `recheck`, for a service that sends none), then hands the broker the tokens it
/// holds, without a restart.
package final class LockedKeyring: Sendable {
    let service: SecretService
    let vault: SecretServiceVault
    let store: TokenProtectingStore
    /// What a person does to unlock it: the message of `StorageLocked`.
    package let message: String

    init(service: SecretService, vault: SecretServiceVault, store: TokenProtectingStore, message: String) {
        self.service = service
        self.vault = vault
        self.store = store
        self.message = message
    }

    /// Returns once the broker has the keyring's tokens, or when cancelled.
    package func serveWhenUnlocked(_ broker: Broker, recheck: Duration = .seconds(30), logger: Logger) async {
        let (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        // Subscribed before the first look, so an unlock between the two is not missed.
        let signals = try? await service.connection.signals(matching: DBusMatchRule(sender: SecretService.busName))
        let listener = Task {
            guard let signals else { return }
            for await _ in signals { wake.yield() }
        }
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: recheck)
                wake.yield()
            }
        }
        defer {
            listener.cancel()
            ticker.cancel()
        }
        wake.yield()
        for await _ in wakeups {
            guard (try? await service.defaultCollectionIsLocked()) == false else { continue }
            if await adoptTokens(broker, logger: logger) { return }
        }
    }

    /// Reads the keyring's tokens into the broker's state; false when it locked again meanwhile.
    private func adoptTokens(_ broker: Broker, logger: Logger) async -> Bool {
        do {
            try await broker.tokenStorageOpened { state in
                let (tokens, known) = try readTokens(deviceId: state.deviceId, logger: logger)
                // Before the commit that follows, so that it compares with what the vault holds.
                if let known { store.vaultOpened(holding: known) }
                var merged = TokenProtectingStore.merge(state, with: tokens, logger: logger)
                // Tokens of sign-ins that ended while the keyring was locked: the sign-out could
                // not revoke what it could not read, so they are owed now.
                merged.owe(Self.forgotten(tokens, adopted: merged))
                return merged
            }
        } catch SecretServiceError.locked {
            return false
        } catch {
            // The tokens stay where they are; token calls keep failing with the reason.
            logger.error("the keyring is unlocked, but its tokens could not be read", metadata: ["error": "\(error)"])
            broker.tokenStorageLocked("the keyring is unlocked, but brokerd could not read its tokens: \(error)")
            return false
        }
        await broker.resumePendingRevocations()
        logger.notice("the keyring is unlocked: tokens are served again")
        return true
    }

    /// The tokens, and what the vault holds as far as later saves are concerned (nil: unknown,
    /// so the next save replaces a damaged item).
    private func readTokens(deviceId: String, logger: Logger) throws -> (StoredTokens?, StoredTokens?) {
        do {
            let tokens = try vault.load(deviceId: deviceId)
            return (tokens, tokens ?? StoredTokens())
        } catch VaultError.unreadable(let why) {
            logger.error("the stored tokens cannot be used; going on without them", metadata: ["why": "\(why)"])
            return (nil, nil)
        }
    }

    /// Refresh tokens the keyring held that the state did not take: their sign-in ended while the
    /// keyring was locked (a sign-out could not revoke what it could not read).
    static func forgotten(
        _ tokens: StoredTokens?, adopted state: BrokerState
    ) -> [PendingRevocation] {
        (tokens?.clients ?? [:]).sorted { $0.key < $1.key }.compactMap { clientId, entry in
            guard let refreshToken = entry.refreshToken, state.clients[clientId]?.refreshToken != refreshToken
            else { return nil }
            return PendingRevocation(clientId: clientId, token: .refreshToken(refreshToken))
        }
    }
}
