import Foundation
import Testing

/// What clients of Microsoft's identity platform expect of a provider, as idp-sim offers it: a
/// GUID tenant, client ids that are GUIDs, Graph's `.default` scope, and refreshes that a refused
/// scope does not spend.
@Suite("idp-sim as Microsoft's clients expect it")
struct MicrosoftClientTests {
    /// idp-sim's directory when the users file names none.
    static let defaultTenant = "4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20"
    static let edge = "ecd6b820-32c2-49b6-98a6-444530e5a77a"
    static let users = """
        {"users": [{"username": "alice@contoso.test", "password": "Passw0rd!", "displayName": "Alice Example"}],
         "clients": [{"clientId": "\(edge)"}, {"clientId": "mail-app", "permissions": ["User.Read", "Mail.Read"]}]}
        """

    @Test func withoutATenantTheDirectoryIsAGUID() async throws {
        let server = try await IdpSimServer.start(users: Self.users, tenant: Self.defaultTenant)
        #expect(UUID(uuidString: Self.defaultTenant) != nil)
        let discovery = try await HTTP.get(server.authority + "/.well-known/openid-configuration")
        #expect(discovery.status == 200)
        #expect(discovery.string("issuer") == server.authority)
        let token = try await passwordGrant(server, clientId: Self.edge)
        #expect(token.status == 200, "\(token.json)")
        #expect(jwtPayload(try #require(token.string("id_token")))["tid"] as? String == Self.defaultTenant)
    }

    @Test func graphDefaultScopeStandsForTheClientsPermissions() async throws {
        let server = try await IdpSimServer.start(users: Self.users, tenant: Self.defaultTenant)
        let edge = try await passwordGrant(
            server, clientId: Self.edge, scope: "openid offline_access https://graph.microsoft.com/.default")
        #expect(edge.status == 200, "\(edge.json)")
        let granted = Set((edge.string("scope") ?? "").split(separator: " ").map(String.init))
        #expect(granted == ["openid", "offline_access", "User.Read"])
        let access = try #require(edge.string("access_token"))
        let me = try await HTTP.get(server.baseURL + "/v1.0/me", headers: ["Authorization": "Bearer \(access)"])
        #expect(me.status == 200)

        let mail = try await passwordGrant(
            server, clientId: "mail-app", scope: "offline_access 00000003-0000-0000-c000-000000000000/.default")
        #expect(
            Set((mail.string("scope") ?? "").split(separator: " ")) == ["offline_access", "User.Read", "Mail.Read"])
        // A refresh with .default again is within the grant.
        let refreshed = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "refresh_token"), ("client_id", "mail-app"),
                ("refresh_token", mail.string("refresh_token") ?? ""),
                ("scope", "offline_access https://graph.microsoft.com/.default"),
            ])
        #expect(refreshed.status == 200, "\(refreshed.json)")
    }

    @Test func aRefusedWiderRefreshLeavesTheRefreshTokenUsable() async throws {
        let server = try await IdpSimServer.start()
        let token = try #require(
            try await passwordGrant(server, scope: "openid offline_access User.Read").string("refresh_token"))
        let widened = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "refresh_token"), ("client_id", "broker-app"), ("refresh_token", token),
                ("scope", "offline_access Mail.Read"),
            ])
        #expect(widened.string("error") == "invalid_scope")
        #expect((widened.json["error_codes"] as? [Int])?.contains(70011) == true)
        // Not spent, so not a reuse: the grant lives on.
        let again = try await refreshGrant(server, token)
        #expect(again.status == 200, "\(again.json)")
        #expect(try await refreshGrant(server, try #require(again.string("refresh_token"))).status == 200)
    }
}
