import BrokerCore
import DBus
import FoundationEssentials
import Locking
import Logging

/// Where brokerd keeps refresh tokens between runs: `--token-storage` or the configuration's
/// `tokenStorage`. Access tokens (and the ID tokens that came with them) are kept in memory only,
/// whatever the storage: they are short-lived, and after a restart the refresh token gets new ones.
public enum TokenStorage: String, Sendable, Codable, CaseIterable {
    /// The desktop's Secret Service (`org.freedesktop.secrets`): the default. Without one on the
    /// bus brokerd refuses to start rather than fall back to anything weaker.
    case secretService = "secret-service"
    /// In `state.json` (0600) with the rest of the state: an explicit opt-in, warned about at start.
    case plaintextFile = "plaintext-file"
    /// Never written: lost when brokerd stops, so apps must sign in again. Warned about at start.
    case memory
}

/// The tokens of a `BrokerState` that are kept apart from the state file: per clientId, the
/// refresh token and the identifier of the account it belongs to.
///
/// Version 2. Version 1 also held each client's access tokens (`accessTokens`): they are read
/// past, counted and dropped (``droppedAccessTokens``).
struct StoredTokens: Codable, Equatable, Sendable {
    static let currentVersion = 2

    struct Client: Codable, Equatable, Sendable {
        /// The `identifier` of the account the tokens were issued to.
        var account: String
        var refreshToken: String?
        /// Access tokens a version 1 item held for this client, not kept (never written).
        var droppedAccessTokens = 0

        init(account: String, refreshToken: String?) {
            self.account = account
            self.refreshToken = refreshToken
        }

        private enum CodingKeys: String, CodingKey { case account, refreshToken, accessTokens }

        /// A JSON value read past, its content never looked at.
        private struct Skipped: Decodable { init(from decoder: any Decoder) throws {} }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            account = try container.decode(String.self, forKey: .account)
            refreshToken = try container.decodeIfPresent(String.self, forKey: .refreshToken)
            droppedAccessTokens =
                try container.decodeIfPresent([String: Skipped].self, forKey: .accessTokens)?.count ?? 0
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(account, forKey: .account)
            try container.encodeIfPresent(refreshToken, forKey: .refreshToken)
        }

        static func == (a: Client, b: Client) -> Bool { a.account == b.account && a.refreshToken == b.refreshToken }
    }

    /// Native SSO's device secret of an account's sign-in, with its ID token.
    struct DeviceSecretEntry: Codable, Equatable, Sendable {
        var deviceSecret: String
        var idToken: String
    }

    /// A token owed a revocation at the provider (``PendingRevocation``).
    struct Revocation: Codable, Equatable, Sendable {
        var clientId: String
        /// `refresh_token` or `device_secret`, as RFC 7009's `token_type_hint` and Native SSO name them.
        var kind: String
        var token: String
    }

    var version = Self.currentVersion
    var clients: [String: Client] = [:]
    /// Per account identifier (absent from items that older brokerds wrote).
    var singleSignOn: [String: DeviceSecretEntry]? = nil
    /// Absent when none (and from items that older brokerds wrote, which skip it).
    var pendingRevocations: [Revocation]? = nil

    var isEmpty: Bool { clients.isEmpty && (singleSignOn ?? [:]).isEmpty && (pendingRevocations ?? []).isEmpty }

    /// Access tokens a version 1 item held, not kept.
    var droppedAccessTokens: Int { clients.values.reduce(0) { $0 + $1.droppedAccessTokens } }

    static func == (a: StoredTokens, b: StoredTokens) -> Bool {
        a.clients == b.clients && (a.singleSignOn ?? [:]) == (b.singleSignOn ?? [:])
            && (a.pendingRevocations ?? []) == (b.pendingRevocations ?? [])
    }
}

/// Keeps the tokens half of the state (`StoredTokens`) somewhere safer than the state file.
protocol TokenVault: Sendable {
    /// What the vault holds for this device, or nil.
    func load(deviceId: String) throws -> StoredTokens?
    /// Replaces what the vault holds for this device; an empty set removes it.
    func save(_ tokens: StoredTokens, deviceId: String) throws
}

/// A `StateStore` that keeps tokens out of the state file: each save splits the state into its
/// public part, written by the wrapped file store with every token removed, and its refresh
/// tokens, written to the vault (or, without one, nowhere: `--token-storage memory`). Access
/// tokens go nowhere: the file store does not keep them either.
///
/// The vault is written first, then the file. A crash between the two leaves a file that still
/// names the account it had; on load a client's tokens are adopted only when the vault says they
/// belong to the account the file gives that client, so a restart never pairs one account with
/// another's tokens. A vault that is newer than the file for the same account (a rotated refresh
/// token) is adopted: that is the newest token the provider issued.
final class TokenProtectingStore: StateStore {
    let file: any StateStore
    let vault: (any TokenVault)?
    let logger: Logger
    /// What the vault holds as far as this process knows (nil: unknown, so the next save writes
    /// it): a save that changes no token (most saves: an app's `lastSeen`) does not touch the vault.
    private let inVault: Locked<StoredTokens?>

    /// The vault opened (its keyring was unlocked) holding `tokens`: what later saves compare with.
    func vaultOpened(holding tokens: StoredTokens) {
        inVault.withLock { $0 = tokens }
    }

    /// `inVault`: what `vault` was found to hold (an empty set when nothing), or nil when unknown.
    init(file: any StateStore, vault: (any TokenVault)?, inVault: StoredTokens?, logger: Logger) {
        self.file = file
        self.vault = vault
        self.logger = logger
        self.inVault = Locked(inVault)
    }

    func load() throws -> BrokerState? {
        guard let state = try file.load() else { return nil }
        return Self.merge(state, with: try vault?.load(deviceId: state.deviceId), logger: logger)
    }

    func sync() throws { try file.sync() }

    func save(_ state: BrokerState, revoked: Set<String>) throws {
        let (publicPart, tokens) = Self.split(state)
        if let vault, tokens != inVault.withLock({ $0 }) {
            try vault.save(tokens, deviceId: state.deviceId)
            inVault.withLock { $0 = tokens }
        }
        try file.save(publicPart, revoked: revoked)
    }

    /// The state without a token, and its refresh tokens. Tokens of a client with no account
    /// cannot be matched to one on load, so they are dropped (the broker never keeps such tokens).
    static func split(_ state: BrokerState) -> (publicPart: BrokerState, tokens: StoredTokens) {
        var publicPart = state
        var tokens = StoredTokens()
        for (clientId, record) in state.clients where record.refreshToken != nil || !record.accessTokens.isEmpty {
            if let account = record.account, let refreshToken = record.refreshToken {
                tokens.clients[clientId] = StoredTokens.Client(account: account.identifier, refreshToken: refreshToken)
            }
            publicPart.clients[clientId] = ClientRecord(lastSeen: record.lastSeen, account: record.account)
        }
        var deviceSecrets: [String: StoredTokens.DeviceSecretEntry] = [:]
        for (identifier, grant) in state.singleSignOn {
            guard let secret = grant.deviceSecret else { continue }
            deviceSecrets[identifier] = StoredTokens.DeviceSecretEntry(
                deviceSecret: secret.secret, idToken: secret.idToken)
            publicPart.singleSignOn[identifier]?.deviceSecret = nil
        }
        tokens.singleSignOn = deviceSecrets.isEmpty ? nil : deviceSecrets
        let owed = state.pendingRevocations.map {
            StoredTokens.Revocation(clientId: $0.clientId, kind: $0.token.kind, token: $0.token.value)
        }
        tokens.pendingRevocations = owed.isEmpty ? nil : owed
        publicPart.pendingRevocations = []
        return (publicPart, tokens)
    }

    /// `state` with each client's tokens from `tokens` where they belong to the account the
    /// state gives that client; other tokens are left out.
    static func merge(_ state: BrokerState, with tokens: StoredTokens?, logger: Logger) -> BrokerState {
        guard let tokens else { return state }
        if tokens.droppedAccessTokens > 0 {
            logger.info(
                Logger.Message(
                    stringLiteral: "the stored tokens held access tokens (format 1), which are no longer kept at rest: "
                        + "dropped; each app's next silent call refreshes them"),
                metadata: ["accessTokens": "\(tokens.droppedAccessTokens)"])
        }
        var merged = state
        for (clientId, entry) in tokens.clients.sorted(by: { $0.key < $1.key }) {
            guard var record = merged.clients[clientId], record.account?.identifier == entry.account else {
                logger.notice(
                    "stored tokens belong to an account this app is not signed in with; not using them",
                    metadata: [
                        "clientId": "\(clientId)", "tokensFor": "\(entry.account)",
                        "signedIn": "\(merged.clients[clientId]?.account?.identifier ?? "nobody")",
                    ])
                continue
            }
            record.refreshToken = entry.refreshToken
            merged.clients[clientId] = record
        }
        // A device secret goes back to the grant of its account; one whose grant the file lacks
        // belongs to a sign-in that is over.
        for (identifier, entry) in tokens.singleSignOn ?? [:] where merged.singleSignOn[identifier] != nil {
            merged.singleSignOn[identifier]?.deviceSecret = DeviceSecret(
                secret: entry.deviceSecret, idToken: entry.idToken)
        }
        // Owed whatever the state file says: they belong to sign-ins that are over.
        merged.owe(
            (tokens.pendingRevocations ?? []).compactMap { entry in
                RevocableToken(kind: entry.kind, value: entry.token).map {
                    PendingRevocation(clientId: entry.clientId, token: $0)
                }
            })
        return merged
    }

    /// Whether `state` holds any token (a state file written by `--token-storage plaintext-file`).
    static func hasTokens(_ state: BrokerState) -> Bool {
        state.clients.values.contains { $0.refreshToken != nil || !$0.accessTokens.isEmpty }
            || state.singleSignOn.values.contains { $0.deviceSecret != nil } || !state.pendingRevocations.isEmpty
    }
}

/// The refresh tokens as one item of the Secret Service's default collection per device, with
/// the attributes `application` (the broker's bus name) and `deviceId`; the secret is the JSON of
/// `StoredTokens`.
final class SecretServiceVault: TokenVault {
    static let application = BrokerNames.busName
    let service: SecretService

    init(service: SecretService) { self.service = service }

    static func attributes(deviceId: String) -> [String: String] {
        ["application": application, "deviceId": deviceId]
    }

    func load(deviceId: String) throws -> StoredTokens? {
        guard let bytes = try service.read(attributes: Self.attributes(deviceId: deviceId)) else { return nil }
        let version: Int
        do {
            struct Header: Decodable { var version: Int }
            version = try JSONDecoder().decode(Header.self, from: Data(bytes)).version
        } catch {
            // Never the decoder's words: they could quote the secret.
            throw VaultError.unreadable(
                "the Secret Service item of this device (application \(Self.application), deviceId \(deviceId)) "
                    + "is not a token set brokerd wrote (\(bytes.count) bytes)")
        }
        guard version <= StoredTokens.currentVersion else {
            throw VaultError.newerFormat(
                "the Secret Service item of this device has format \(version); this brokerd reads up to "
                    + "\(StoredTokens.currentVersion). Run the newer brokerd, or delete the item with your keyring app")
        }
        do {
            return try JSONDecoder().decode(StoredTokens.self, from: Data(bytes))
        } catch {
            throw VaultError.unreadable(
                "the Secret Service item of this device (application \(Self.application), deviceId \(deviceId)) "
                    + "is damaged (\(bytes.count) bytes)")
        }
    }

    func save(_ tokens: StoredTokens, deviceId: String) throws {
        let attributes = Self.attributes(deviceId: deviceId)
        if tokens.isEmpty {
            try service.delete(attributes: attributes)
            return
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(tokens)
        try service.write(
            label: "Shared-device broker tokens (device \(deviceId))", attributes: attributes,
            secret: [UInt8](data), contentType: "application/json")
    }
}

/// Why the vault's item could not be used.
enum VaultError: Error, CustomStringConvertible {
    case unreadable(String)
    case newerFormat(String)

    var description: String {
        switch self {
        case .unreadable(let why), .newerFormat(let why): return why
        }
    }
}
