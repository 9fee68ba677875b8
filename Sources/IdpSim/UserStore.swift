import Crypto
import Foundation

/// One account that can sign in, as read from the users file.
struct UserAccount: Sendable, Equatable {
    var username: String
    var password: String?
    var displayName: String
    var email: String?
    /// The stable object id (`oid`): the file's `id`, or a UUID derived from the username so that
    /// restarting the provider with the same file yields the same subject for the broker's cache.
    var objectId: String
    /// Which sign-in methods the account supports ("password", "emailOtp").
    var authMethods: Set<String>
    /// The user's own tenant (`tid`) where it differs from the file's: a guest of the
    /// multi-tenant authority (`--entra-common`).
    var tenantId: String? = nil

    var supportsPassword: Bool { authMethods.contains("password") && password != nil }
    var supportsEmailOTP: Bool { authMethods.contains("emailOtp") }
}

/// A registered application. A client without a secret is a public client (native app).
struct ClientRegistration: Sendable, Equatable {
    var clientId: String
    var clientSecret: String?
    var redirectUris: [String]
    /// The family of clients whose refresh tokens each may redeem (Entra's "family of client ids").
    var family: String? = nil
    /// Whether the client may get tokens through single sign-on (token exchanges, another family
    /// member's refresh token); an administrator's switch per application.
    var singleSignOn = true
    /// The Graph permissions an administrator granted the application: what Entra's
    /// `https://graph.microsoft.com/.default` scope stands for.
    var permissions = UserStore.defaultPermissions

    var isConfidential: Bool { clientSecret != nil }
}

/// The tenant's directory: users and registered clients, immutable after start-up.
struct UserStore: Sendable {
    var tenantId: String
    private var usersByName: [String: UserAccount]
    private var clientsById: [String: ClientRegistration]

    init(tenantId: String, users: [UserAccount], clients: [ClientRegistration]) {
        self.tenantId = tenantId
        // Usernames are UPNs / emails: match them case-insensitively like Entra does.
        self.usersByName = Dictionary(
            users.map { ($0.username.lowercased(), $0) }, uniquingKeysWith: { first, _ in first })
        self.clientsById = Dictionary(clients.map { ($0.clientId, $0) }, uniquingKeysWith: { first, _ in first })
    }

    func user(named username: String) -> UserAccount? {
        usersByName[username.lowercased()]
    }

    func user(objectId: String) -> UserAccount? {
        usersByName.values.first { $0.objectId == objectId }
    }

    func client(_ clientId: String) -> ClientRegistration? {
        clientsById[clientId]
    }
}

/// Why a users file could not be used; the message is shown to the operator as is.
struct UsersFileError: Error, CustomStringConvertible {
    var description: String
}

extension UserStore {
    /// The JSON layout of `--users FILE`.
    private struct FileFormat: Decodable {
        struct User: Decodable {
            var username: String
            var password: String?
            var displayName: String
            var email: String?
            var id: String?
            var authMethods: [String]?
            var tenantId: String?
        }
        struct Client: Decodable {
            var clientId: String
            var clientSecret: String?
            var redirectUris: [String]?
            var family: String?
            var singleSignOn: Bool?
            var permissions: [String]?
        }
        var tenantId: String?
        var users: [User]
        var clients: [Client]
    }

    static let knownAuthMethods: Set<String> = ["password", "emailOtp"]
    /// The tenant id when the users file names none: a GUID, as Entra's are (clients of
    /// Microsoft's broker protocol parse the account's realm as one).
    static let defaultTenantId = "4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20"
    /// A client's Graph permissions when the users file lists none.
    static let defaultPermissions = ["User.Read"]

    /// Reads and validates a users file.
    static func load(path: String) throws -> UserStore {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw UsersFileError(description: "cannot read users file \(path): \(error.localizedDescription)")
        }
        return try parse(data, source: path)
    }

    static func parse(_ data: Data, source: String) throws -> UserStore {
        let file: FileFormat
        do {
            file = try JSONDecoder().decode(FileFormat.self, from: data)
        } catch let error as DecodingError {
            throw UsersFileError(description: "invalid users file \(source): \(describe(error))")
        } catch {
            throw UsersFileError(description: "invalid users file \(source): \(error)")
        }
        let tenant = (file.tenantId ?? defaultTenantId).trimmingCharacters(in: .whitespaces)
        guard !tenant.isEmpty, !tenant.contains("/") else {
            throw UsersFileError(description: "invalid users file \(source): tenantId must be a non-empty path segment")
        }
        var seen = Set<String>()
        var users: [UserAccount] = []
        for user in file.users {
            guard !user.username.isEmpty else {
                throw UsersFileError(description: "invalid users file \(source): a user has an empty username")
            }
            guard seen.insert(user.username.lowercased()).inserted else {
                throw UsersFileError(description: "invalid users file \(source): duplicate user \(user.username)")
            }
            let methods = Set(user.authMethods ?? (user.password == nil ? ["emailOtp"] : ["password"]))
            if let unknown = methods.subtracting(knownAuthMethods).first {
                throw UsersFileError(
                    description: "invalid users file \(source): user \(user.username) has unknown authMethod \(unknown)"
                )
            }
            if methods.contains("password"), user.password == nil {
                throw UsersFileError(
                    description:
                        "invalid users file \(source): user \(user.username) has authMethod password but no password")
            }
            users.append(
                UserAccount(
                    username: user.username,
                    password: user.password,
                    displayName: user.displayName,
                    email: user.email,
                    objectId: user.id ?? derivedObjectId(username: user.username),
                    authMethods: methods, tenantId: user.tenantId
                ))
        }
        var clientIds = Set<String>()
        var clients: [ClientRegistration] = []
        for client in file.clients {
            guard !client.clientId.isEmpty, clientIds.insert(client.clientId).inserted else {
                throw UsersFileError(
                    description: "invalid users file \(source): empty or duplicate clientId \(client.clientId)")
            }
            if let family = client.family, family.isEmpty {
                throw UsersFileError(
                    description: "invalid users file \(source): client \(client.clientId) has an empty family")
            }
            clients.append(
                ClientRegistration(
                    clientId: client.clientId, clientSecret: client.clientSecret,
                    redirectUris: client.redirectUris ?? [], family: client.family,
                    singleSignOn: client.singleSignOn ?? true, permissions: client.permissions ?? defaultPermissions))
        }
        return UserStore(tenantId: tenant, users: users, clients: clients)
    }

    /// A name-based (version 5 style) UUID over the lower-cased username, so the `oid` survives restarts.
    static func derivedObjectId(username: String) -> String {
        nameBasedUUID("idp-sim:user:\(username.lowercased())")
    }

    /// The `oid` of an application's own tokens (client credentials): name-based too, so that it
    /// survives restarts, and never equal to a user's.
    static func derivedObjectId(clientId: String) -> String {
        nameBasedUUID("idp-sim:client:\(clientId)")
    }

    private static func nameBasedUUID(_ name: String) -> String {
        var bytes = Array(Insecure.SHA1.hash(data: Data(name.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let uuid = UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
        return uuid.uuidString.lowercased()
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return keys.isEmpty ? "top level" : keys.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing key \"\(key.stringValue)\" at \(path(context))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "wrong type at \(path(context)): \(context.debugDescription)"
        case .dataCorrupted(let context):
            return "not valid JSON (\(context.debugDescription))"
        @unknown default:
            return "\(error)"
        }
    }
}
