import BrokerCore
import FoundationEssentials
import Glibc
import Identity

/// brokerd's configuration file (`--config FILE`, JSON). Every field is optional; command-line
/// flags win over it.
///
/// ```json
/// {
///   "deviceMode": "shared",
///   "authority": "https://login.example/TENANT/v2.0",
///   "tenantId": "TENANT",
///   "tokenStorage": "secret-service",
///   "compatibility": ["microsoft-broker1"],
///   "browserSignOut": "always",
///   "clients": [{"clientId": "mail-app", "name": "Mail"},
///               {"clientId": "backoffice", "clientSecretFile": "/etc/shared-device-broker/backoffice.secret",
///                "clientSecretMethod": "client_secret_post"},
///               {"clientId": "kiosk-app", "allowedExecutables": ["/usr/bin/kiosk-app"]}]
/// }
/// ```
///
/// A key the broker does not know is an error that names it: a misspelt setting silently ignored
/// is a setting the administrator believes in and does not have. A client secret is read from a
/// file only its owner can read: `clientSecretFile`, or `clientSecret` in a configuration file
/// that is itself readable by its owner alone.
/// Another broker's D-Bus protocol brokerd can serve besides its own (`--compat`, `compatibility`).
public enum CompatibilityProtocol: String, Sendable, Codable, CaseIterable {
    /// Microsoft's Linux identity broker: `com.microsoft.identity.broker1`
    /// (docs/microsoft-broker1.md). Off by default: a machine with Microsoft's broker keeps it.
    case microsoftBroker1 = "microsoft-broker1"
}

public struct DaemonConfigurationFile: Decodable, Sendable {
    public struct Client: Decodable, Sendable {
        public var clientId: String
        public var name: String?
        public var clientSecret: String?
        /// A file holding the secret (surrounding white space ignored), readable by its owner alone.
        public var clientSecretFile: String?
        public var clientSecretMethod: String?
        /// When present, only processes running one of these executables may use this clientId.
        public var allowedExecutables: [String]?

        private enum CodingKeys: String, CodingKey, CaseIterable {
            case clientId, name, clientSecret, clientSecretFile, clientSecretMethod, allowedExecutables
        }

        /// Every key a client's entry may have (broker.conf(5) documents each).
        static let knownKeys = CodingKeys.allCases.map(\.rawValue)

        public init(from decoder: any Decoder) throws {
            try UnknownKey.check(decoder, known: Self.knownKeys)
            let values = try decoder.container(keyedBy: CodingKeys.self)
            clientId = try values.decode(String.self, forKey: .clientId)
            name = try values.decodeIfPresent(String.self, forKey: .name)
            clientSecret = try values.decodeIfPresent(String.self, forKey: .clientSecret)
            clientSecretFile = try values.decodeIfPresent(String.self, forKey: .clientSecretFile)
            clientSecretMethod = try values.decodeIfPresent(String.self, forKey: .clientSecretMethod)
            allowedExecutables = try values.decodeIfPresent([String].self, forKey: .allowedExecutables)
        }
    }
    public var deviceMode: DeviceMode?
    public var authority: String?
    public var tenantId: String?
    /// When present, only these clientIds may use the broker.
    public var clients: [Client]?
    /// Where tokens are kept between runs: `secret-service` (the default), `plaintext-file` or `memory`.
    public var tokenStorage: TokenStorage?
    /// Whether a password sign-in may use the resource-owner password grant, which the OAuth 2.0
    /// Security BCP (RFC 9700) deprecates, where the provider offers no native authentication.
    public var allowPasswordGrant: Bool?
    /// Other brokers' protocols brokerd also serves, over the same state.
    public var compatibility: [CompatibilityProtocol]?
    /// When a sign-out also ends the provider's browser session (default: `always` in shared
    /// mode, `when-asked` in default mode).
    public var browserSignOut: BrowserSignOutPolicy?
    /// At most this many clientIds are remembered (default 1000; never fewer than `clients` names).
    public var maxClients: Int?
    /// Whether a sign-in made before the device restarted ends when brokerd starts (shared mode).
    public var signOutAfterReboot: Bool?
    /// Paths under the user's home (globs allowed) removed after every sign-out of the device.
    public var clearOnSignOut: [String]?

    private enum CodingKeys: String, CodingKey, CaseIterable {
        case deviceMode, authority, tenantId, clients, tokenStorage, allowPasswordGrant, compatibility, browserSignOut
        case maxClients, signOutAfterReboot, clearOnSignOut
    }

    /// Every key the file may have (broker.conf(5) documents each).
    static let knownKeys = CodingKeys.allCases.map(\.rawValue)

    public init(from decoder: any Decoder) throws {
        try UnknownKey.check(decoder, known: Self.knownKeys)
        let values = try decoder.container(keyedBy: CodingKeys.self)
        deviceMode = try values.decodeIfPresent(DeviceMode.self, forKey: .deviceMode)
        authority = try values.decodeIfPresent(String.self, forKey: .authority)
        tenantId = try values.decodeIfPresent(String.self, forKey: .tenantId)
        clients = try values.decodeIfPresent([Client].self, forKey: .clients)
        tokenStorage = try values.decodeIfPresent(TokenStorage.self, forKey: .tokenStorage)
        allowPasswordGrant = try values.decodeIfPresent(Bool.self, forKey: .allowPasswordGrant)
        compatibility = try values.decodeIfPresent([CompatibilityProtocol].self, forKey: .compatibility)
        browserSignOut = try values.decodeIfPresent(BrowserSignOutPolicy.self, forKey: .browserSignOut)
        maxClients = try values.decodeIfPresent(Int.self, forKey: .maxClients)
        signOutAfterReboot = try values.decodeIfPresent(Bool.self, forKey: .signOutAfterReboot)
        clearOnSignOut = try values.decodeIfPresent([String].self, forKey: .clearOnSignOut)
        if let maxClients, !(1...1_000_000).contains(maxClients) {
            throw DecodingError.dataCorruptedError(
                forKey: .maxClients, in: values, debugDescription: "maxClients must be between 1 and 1000000")
        }
    }

    public init(
        deviceMode: DeviceMode? = nil, authority: String? = nil, tenantId: String? = nil, clients: [Client]? = nil,
        tokenStorage: TokenStorage? = nil, allowPasswordGrant: Bool? = nil,
        compatibility: [CompatibilityProtocol]? = nil, browserSignOut: BrowserSignOutPolicy? = nil,
        maxClients: Int? = nil, signOutAfterReboot: Bool? = nil, clearOnSignOut: [String]? = nil
    ) {
        self.maxClients = maxClients
        self.signOutAfterReboot = signOutAfterReboot
        self.clearOnSignOut = clearOnSignOut
        self.compatibility = compatibility
        self.browserSignOut = browserSignOut
        self.deviceMode = deviceMode
        self.authority = authority
        self.tenantId = tenantId
        self.clients = clients
        self.tokenStorage = tokenStorage
        self.allowPasswordGrant = allowPasswordGrant
    }

    /// Where the administrator's configuration lives. It wins over the user's file and flags.
    public static let administratorPath = "/etc/shared-device-broker/broker.conf"

    /// The administrator's configuration: `administratorPath` when it exists, else `fallback`
    /// (for tests and staged installs; it never hides an existing administrator file), else none.
    /// The file must belong to root and be writable by nobody else, or brokerd refuses to start:
    /// a device mode anyone could have written is no administrator's decision.
    public static func loadAdministrator(fallback: String? = nil) throws(DaemonError) -> DaemonConfigurationFile? {
        var info = stat()
        let path: String
        if stat(administratorPath, &info) == 0 {
            path = administratorPath
        } else if let fallback, stat(fallback, &info) == 0 {
            path = fallback
        } else {
            return nil
        }
        guard info.st_uid == 0, info.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            throw DaemonError.configuration(
                "the administrator's configuration \(path) must belong to root and be writable by nobody else (owner "
                    + "\(info.st_uid), mode \(String(info.st_mode & 0o777, radix: 8))); fix it with: chown root:root "
                    + "\(path) && chmod 644 \(path)"
            )
        }
        return try load(path: path)
    }

    /// This configuration with every setting `administrator` makes taking its place.
    public func overridden(by administrator: DaemonConfigurationFile?) -> DaemonConfigurationFile {
        guard let administrator else { return self }
        return DaemonConfigurationFile(
            deviceMode: administrator.deviceMode ?? deviceMode,
            authority: administrator.authority ?? authority,
            tenantId: administrator.tenantId ?? tenantId,
            clients: administrator.clients ?? clients,
            tokenStorage: administrator.tokenStorage ?? tokenStorage,
            allowPasswordGrant: administrator.allowPasswordGrant ?? allowPasswordGrant,
            compatibility: administrator.compatibility ?? compatibility,
            browserSignOut: administrator.browserSignOut ?? browserSignOut,
            maxClients: administrator.maxClients ?? maxClients,
            signOutAfterReboot: administrator.signOutAfterReboot ?? signOutAfterReboot,
            clearOnSignOut: administrator.clearOnSignOut ?? clearOnSignOut)
    }

    public static func load(path: String) throws(DaemonError) -> DaemonConfigurationFile {
        let bytes: [UInt8]
        do {
            bytes = try FileBytes.read(path)
        } catch {
            throw DaemonError.configuration("cannot read the configuration file \(path): \(error)")
        }
        let file: DaemonConfigurationFile
        do {
            file = try JSONDecoder().decode(DaemonConfigurationFile.self, from: Data(bytes))
        } catch let unknown as UnknownKey {
            throw DaemonError.configuration("the configuration file \(path) \(unknown)")
        } catch {
            throw DaemonError.configuration("the configuration file \(path) is not valid: \(error)")
        }
        if let inline = file.clients?.first(where: { $0.clientSecret != nil }), let mode = try SecretFile.openMode(path)
        {
            throw DaemonError.configuration(
                "the configuration file \(path) holds the client secret of \(inline.clientId), but others can read it "
                    + "(mode \(String(mode, radix: 8))): put the secret in a file of its own that only brokerd's user "
                    + "can read (chmod 600) and name it with clientSecretFile, or chmod 600 \(path)")
        }
        return file
    }

    /// clientId -> the executables allowed to use it, for the clients that are bound.
    public func allowedExecutables() -> [String: Set<String>] {
        var bound: [String: Set<String>] = [:]
        for client in clients ?? [] {
            if let executables = client.allowedExecutables { bound[client.clientId] = Set(executables) }
        }
        return bound
    }

    /// The configured client secrets, for confidential clients.
    public func clientSecrets() throws(DaemonError) -> [String: ClientSecret] {
        var secrets: [String: ClientSecret] = [:]
        for client in clients ?? [] {
            if client.clientSecret != nil && client.clientSecretFile != nil {
                throw DaemonError.configuration(
                    "client \(client.clientId): give clientSecret or clientSecretFile, not both")
            }
            let secret: String
            if let inline = client.clientSecret {
                secret = inline
            } else if let file = client.clientSecretFile {
                secret = try SecretFile.read(file)
            } else {
                continue
            }
            let method = ClientSecret.Method(rawValue: client.clientSecretMethod ?? "client_secret_basic")
            guard let method else {
                throw DaemonError.configuration(
                    "client \(client.clientId): clientSecretMethod must be client_secret_basic or client_secret_post")
            }
            secrets[client.clientId] = ClientSecret(secret: secret, method: method)
        }
        return secrets
    }
}

/// A key of the configuration the broker does not know, with where it stands.
struct UnknownKey: Error, CustomStringConvertible {
    var key: String
    var place: String
    var known: [String]

    var description: String {
        "has an unknown key \"\(key)\" \(place) (the keys there are \(known.sorted().joined(separator: ", ")))"
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// Throws for the first key of `decoder`'s object that is not in `known`.
    static func check(_ decoder: any Decoder, known: [String]) throws {
        let keys = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue)
        guard let unknown = keys.sorted().first(where: { !known.contains($0) }) else { return }
        let path = decoder.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        throw UnknownKey(
            key: unknown, place: path.isEmpty ? "at the top level" : "in \(path.dropFirst())", known: known)
    }
}

/// A client secret's file, and the rule for any file that holds one: only its owner may read it.
enum SecretFile {
    /// The permission bits of `path` when its group or others may read or write it; nil when
    /// only its owner can.
    static func openMode(_ path: String) throws(DaemonError) -> UInt32? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw DaemonError.configuration("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        let mode = UInt32(info.st_mode) & 0o777
        return mode & 0o077 == 0 ? nil : mode
    }

    /// The secret `path` holds, without surrounding white space.
    static func read(_ path: String) throws(DaemonError) -> String {
        if let mode = try openMode(path) {
            throw DaemonError.configuration(
                "the client secret file \(path) can be read by others (mode \(String(mode, radix: 8))): "
                    + "chmod 600 \(path)")
        }
        let bytes: [UInt8]
        do {
            bytes = try FileBytes.read(path, limit: 4096)
        } catch {
            throw DaemonError.configuration("cannot read the client secret file \(path): \(error)")
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let secret = String(text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
        guard !secret.isEmpty else { throw DaemonError.configuration("the client secret file \(path) is empty") }
        return secret
    }
}

/// Why brokerd could not start.
public enum DaemonError: Error, CustomStringConvertible {
    case configuration(String)
    case state(String)
    case bus(String)

    public var description: String {
        switch self {
        case .configuration(let why), .state(let why), .bus(let why): return why
        }
    }
}
