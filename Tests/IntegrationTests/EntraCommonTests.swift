import Foundation
import TestSupport
import Testing

/// Microsoft Entra ID's multi-tenant authority, mimicked exactly by `idp-sim --entra-common`:
/// discovery at `/common/v2.0` gives the issuer as the template `{base}/{tenantid}/v2.0`, each
/// token is issued by its user's own tenant, and there is no revocation endpoint. Over a private
/// bus with the real brokerd, brokerctl and idp-sim.
@Suite("Entra's multi-tenant authority", .serialized)
struct EntraCommonTests {
    static let guest = (username: "guest@fabrikam.example", password: "guest-Passw0rd!", name: "Guest Example")
    static let guestTenant = "fabrikam-tenant"
    static let users = """
        {"tenantId": "\(TestUsers.tenant)",
         "users": [
           {"username": "\(TestUsers.alice.username)", "password": "\(TestUsers.alice.password)", \
        "displayName": "\(TestUsers.alice.name)"},
           {"username": "\(guest.username)", "password": "\(guest.password)", "displayName": "\(guest.name)", \
        "tenantId": "\(guestTenant)"}
         ],
         "clients": [{"clientId": "mail-app"}, {"clientId": "calendar-app"}]}
        """

    /// A bus, idp-sim as Entra's common authority, and brokerd on it (password grant allowed:
    /// the common authority offers no native authentication).
    final class Setup: @unchecked Sendable {
        let directory: TemporaryDirectory
        let bus: PrivateBus
        let idp: IdpSim
        let brokerd: ChildProcess
        let authority: String

        init(mode: String, brokerArguments: [String] = []) throws {
            directory = try TemporaryDirectory()
            bus = try PrivateBus()
            idp = try IdpSim(
                in: directory, users: EntraCommonTests.users, tenant: TestUsers.tenant,
                extraArguments: ["--entra-common"])
            authority = idp.baseURL + "/common/v2.0"
            brokerd = try ChildProcess(
                "brokerd", executable: Binaries.path("brokerd"),
                arguments: [
                    "--address", bus.address, "--authority", authority, "--device-mode", mode,
                    "--state-dir", directory.path + "/state", "--token-storage", "memory", "--allow-password-grant",
                ] + brokerArguments, environment: ["BROWSER": "/bin/true"])
            try brokerd.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("brokerd ready:") }
        }

        func brokerctl(_ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
            try await runCommand(Binaries.path("brokerctl"), arguments + ["--address", bus.address], stdin: stdin)
        }

        func signIn(_ user: (username: String, password: String, name: String), client: String) async throws
            -> CommandResult
        {
            try await brokerctl(
                [
                    "sign-in", "--client-id", client, "--username", user.username, "--password-stdin", "--json",
                    "--scope", "User.Read",
                ],
                stdin: user.password + "\n")
        }
    }

    static func tenant(of result: CommandResult) throws -> String? {
        (try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            .flatMap { $0["account"] as? [String: Any] }?["tenantId"] as? String
    }

    @Test("the {tenantid} issuer is accepted; users of two tenants sign in; sign-out says there is no revocation")
    func twoTenants() async throws {
        let setup = try await offThePool { try Setup(mode: "default") }
        let alice = try await setup.signIn(TestUsers.alice, client: "mail-app")
        #expect(alice.status == 0, "\(alice.stderr)")
        #expect(try Self.tenant(of: alice) == TestUsers.tenant)
        let guest = try await setup.signIn(Self.guest, client: "calendar-app")
        #expect(guest.status == 0, "\(guest.stderr)")
        #expect(try Self.tenant(of: guest) == Self.guestTenant)

        // A refresh brings a new ID token, checked against the template again.
        let refreshed = try await setup.brokerctl(
            ["token", "--client-id", "calendar-app", "--scope", "User.Read", "--force-refresh"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")

        let signOut = try await setup.brokerctl(["sign-out", "--client-id", "mail-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let result = try #require(try JSONSerialization.jsonObject(with: Data(signOut.stdout.utf8)) as? [String: Any])
        #expect(result["tokensRevoked"] as? Bool == false)
        #expect((result["notes"] as? [String] ?? []).contains { $0.contains("no token revocation") }, "\(result)")
    }

    @Test("tenantId in the configuration admits that tenant's users only")
    func tenantAllowList() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("brokerd.json", #"{"tenantId": "\#(TestUsers.tenant)"}"#)
        let setup = try await offThePool { try Setup(mode: "shared", brokerArguments: ["--config", config]) }
        let guest = try await setup.signIn(Self.guest, client: "calendar-app")
        #expect(guest.status == 1)
        #expect(guest.stderr.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(guest.stderr)")
        #expect(
            guest.stderr.contains("belongs to tenant \(Self.guestTenant)")
                && guest.stderr.contains("admits only tenant \(TestUsers.tenant)"), "\(guest.stderr)")
        let current = try await setup.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        #expect(
            current.stdout.contains("\"current\" : null") || current.stdout.contains("\"current\":null"),
            "\(current.stdout)")

        let alice = try await setup.signIn(TestUsers.alice, client: "mail-app")
        #expect(alice.status == 0, "\(alice.stderr)")
    }
}
