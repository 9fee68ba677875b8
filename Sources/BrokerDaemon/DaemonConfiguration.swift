import BrokerCore
import FoundationEssentials
import Identity

/// brokerd's configuration file (`--config FILE`, JSON). Every field is optional; command-line
/// flags win over it.
///
/// ```json
/// {
///   "deviceMode": "shared",
///   "authority": "https://login.example/TENANT/v2.0",
///   "tenantId": "TENANT",
///   "clients": [{"clientId": "mail-app", "name": "Mail"},
///               {"clientId": "backoffice", "clientSecret": "...", "clientSecretMethod": "client_secret_post"}]
/// }
/// ```
public struct DaemonConfigurationFile: Decodable, Sendable {
    public struct Client: Decodable, Sendable {
        public var clientId: String
        public var name: String?
        public var clientSecret: String?
        public var clientSecretMethod: String?
    }
    public var deviceMode: DeviceMode?
    public var authority: String?
    public var tenantId: String?
    /// When present, only these clientIds may use the broker.
    public var clients: [Client]?

    public init(deviceMode: DeviceMode? = nil, authority: String? = nil, tenantId: String? = nil, clients: [Client]? = nil) {
        self.deviceMode = deviceMode
        self.authority = authority
        self.tenantId = tenantId
        self.clients = clients
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

    /// The configured client secrets, for confidential clients.
    public func clientSecrets() throws(DaemonError) -> [String: ClientSecret] {
        var secrets: [String: ClientSecret] = [:]
        for client in clients ?? [] {
            guard let secret = client.clientSecret else { continue }
            let method = ClientSecret.Method(rawValue: client.clientSecretMethod ?? "client_secret_basic")
            guard let method else {
                throw DaemonError.configuration("client \(client.clientId): clientSecretMethod must be client_secret_basic or client_secret_post")
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
