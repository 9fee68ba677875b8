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
///   "clients": [{"clientId": "mail-app", "name": "Mail"},
///               {"clientId": "backoffice", "clientSecret": "...", "clientSecretMethod": "client_secret_post"},
///               {"clientId": "kiosk-app", "allowedExecutables": ["/usr/bin/kiosk-app"]}]
/// }
/// ```
public struct DaemonConfigurationFile: Decodable, Sendable {
    public struct Client: Decodable, Sendable {
        public var clientId: String
        public var name: String?
        public var clientSecret: String?
        public var clientSecretMethod: String?
        /// When present, only processes running one of these executables may use this clientId.
        public var allowedExecutables: [String]?
    }
    public var deviceMode: DeviceMode?
    public var authority: String?
    public var tenantId: String?
    /// When present, only these clientIds may use the broker.
    public var clients: [Client]?
    /// Where tokens are kept between runs: `secret-service` (the default), `plaintext-file` or `memory`.
    public var tokenStorage: TokenStorage?

    public init(
        deviceMode: DeviceMode? = nil, authority: String? = nil, tenantId: String? = nil, clients: [Client]? = nil,
        tokenStorage: TokenStorage? = nil
    ) {
        self.deviceMode = deviceMode
        self.authority = authority
        self.tenantId = tenantId
        self.clients = clients
        self.tokenStorage = tokenStorage
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
            tokenStorage: administrator.tokenStorage ?? tokenStorage)
    }

    public static func load(path: String) throws(DaemonError) -> DaemonConfigurationFile {
        let bytes: [UInt8]
        do {
            bytes = try FileBytes.read(path)
        } catch {
            throw DaemonError.configuration("cannot read the configuration file \(path): \(error)")
        }
        do {
            return try JSONDecoder().decode(DaemonConfigurationFile.self, from: Data(bytes))
        } catch {
            throw DaemonError.configuration("the configuration file \(path) is not valid: \(error)")
        }
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
            guard let secret = client.clientSecret else { continue }
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
