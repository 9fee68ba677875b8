import Foundation
import TestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A running `idp-sim` child process, started from the built binary with its own users file and port.
final class IdpSimServer: Sendable {
    let baseURL: String
    let tenantId: String

    var authority: String { "\(baseURL)/\(tenantId)/v2.0" }
    var tokenURL: String { authority + "/oauth2/v2.0/token" }

    static let defaultUsers = """
        {"tenantId": "11111111-2222-3333-4444-555555555555",
         "users": [
           {"username": "alice@contoso.test", "password": "Passw0rd!", "displayName": "Alice Example", "email": "alice@contoso.test"},
           {"username": "bob@contoso.test", "displayName": "Bob Otp", "email": "bob@contoso.test", "authMethods": ["emailOtp"]},
           {"username": "carol@contoso.test", "password": "Carol#1", "displayName": "Carol Both", "email": "carol@contoso.test",
            "id": "00000000-0000-0000-0000-0000000000c0", "authMethods": ["password", "emailOtp"]}
         ],
         "clients": [
           {"clientId": "broker-app", "redirectUris": ["http://127.0.0.1/callback"]},
           {"clientId": "conf-app", "clientSecret": "s3cret"}
         ]}
        """

    private let server: IdpSim
    private let directory: TemporaryDirectory

    private init(server: IdpSim, directory: TemporaryDirectory, tenantId: String) {
        self.server = server
        self.directory = directory
        self.tenantId = tenantId
        baseURL = server.baseURL
    }

    /// Writes a users file, starts the binary and waits (at most 30 s) for `listening on …`, on a
    /// thread of its own so that parallel tests do not starve the cooperative thread pool.
    /// `tenant` is the directory the users file names, or idp-sim's default when it names none.
    static func start(users: String = IdpSimServer.defaultUsers, arguments: [String] = [], tenant: String? = nil)
        async throws -> IdpSimServer
    {
        let tenant =
            tenant ?? (try? JSONSerialization.jsonObject(with: Data(users.utf8)) as? [String: Any])?["tenantId"]
            as? String ?? ""
        return try await offThePool {
            let directory = try TemporaryDirectory()
            let server = try IdpSim(
                in: directory, users: users, tenant: tenant,
                extraArguments: ["--log-level", "warning"] + arguments)
            return IdpSimServer(server: server, directory: directory, tenantId: tenant)
        }
    }

    /// SIGTERM, and the exit status (bounded wait).
    func stop() throws -> Int32 {
        server.process.signal(SIGTERM)
        return try server.process.waitForExit(timeout: .seconds(10))
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
