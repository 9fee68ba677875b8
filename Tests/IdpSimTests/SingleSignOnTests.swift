import Crypto
import Foundation
import Testing

/// idp-sim's single sign-on mechanisms over real HTTP: Native SSO (draft 07), family refresh
/// tokens and RFC 8693 token exchange, each advertised, each switchable off.
@Suite("idp-sim single sign-on")
struct IdpSimSingleSignOnTests {
    static let users = """
        {"tenantId": "11111111-2222-3333-4444-555555555555",
         "users": [
           {"username": "alice@contoso.test", "password": "Passw0rd!", "displayName": "Alice Example", "email": "alice@contoso.test"},
           {"username": "carol@contoso.test", "password": "Carol#1", "displayName": "Carol", "email": "carol@contoso.test"}
         ],
         "clients": [
           {"clientId": "mail", "family": "1"}, {"clientId": "calendar", "family": "1"},
           {"clientId": "outsider"}, {"clientId": "locked", "family": "1", "singleSignOn": false}
         ]}
        """
    static let exchange = "urn:ietf:params:oauth:grant-type:token-exchange"

    static func signIn(
        _ server: IdpSimServer, client: String = "mail", username: String = "alice@contoso.test",
        password: String = "Passw0rd!"
    ) async throws -> HTTPResult {
        try await passwordGrant(
            server, username: username, password: password, clientId: client,
            scope: "openid profile offline_access User.Read device_sso")
    }

    static func nativeSSO(
        _ server: IdpSimServer, client: String, idToken: String, secret: String,
        extra: [(String, String)] = []
    ) async throws -> HTTPResult {
        try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", exchange), ("client_id", client), ("audience", server.authority),
                ("subject_token", idToken), ("subject_token_type", "urn:ietf:params:oauth:token-type:id_token"),
                ("actor_token", secret), ("actor_token_type", "urn:openid:params:token-type:device-secret"),
                ("scope", "openid offline_access User.Read"),
            ] + extra)
    }

    static func claims(_ jwt: String?) throws -> [String: Any] {
        let parts = (jwt ?? "").split(separator: ".")
        guard parts.count == 3 else { throw ClaimsError() }
        var payload = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        payload += String(repeating: "=", count: (4 - payload.count % 4) % 4)
        guard let data = Data(base64Encoded: payload),
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { throw ClaimsError() }
        return object
    }
    struct ClaimsError: Error {}

    /// Native SSO 3.4.1's `ds_hash`, computed here independently of idp-sim.
    static func dsHash(_ secret: String) -> String {
        Data(SHA256.hash(data: Data(secret.utf8)).prefix(16)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
                of: "=", with: "")
    }

    @Test func discoveryAdvertisesEachMechanismUnlessSwitchedOff() async throws {
        let full = try await IdpSimServer.start(users: Self.users)
        let document = try await HTTP.get(full.authority + "/.well-known/openid-configuration").json
        #expect(document["native_sso_supported"] as? Bool == true)
        #expect((document["scopes_supported"] as? [String])?.contains("device_sso") == true)
        #expect((document["grant_types_supported"] as? [String])?.contains(Self.exchange) == true)

        let plain = try await IdpSimServer.start(
            users: Self.users,
            arguments: [
                "--without", "native-sso", "--without", "family-tokens", "--without", "token-exchange",
            ])
        let bare = try await HTTP.get(plain.authority + "/.well-known/openid-configuration").json
        #expect(bare["native_sso_supported"] == nil)
        #expect((bare["grant_types_supported"] as? [String])?.contains(Self.exchange) == false)
        let signIn = try await Self.signIn(plain)
        #expect(signIn.status == 200)
        #expect(signIn.json["device_secret"] == nil && signIn.json["foci"] == nil)
        let refused = try await HTTP.postForm(
            plain.tokenURL,
            [
                ("grant_type", Self.exchange), ("client_id", "calendar"),
                ("subject_token", signIn.string("access_token") ?? ""),
                ("subject_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ])
        #expect(refused.status == 400 && refused.string("error") == "unsupported_grant_type")
        let family = try await refreshGrant(plain, signIn.string("refresh_token") ?? "", clientId: "calendar")
        #expect(family.status == 400 && family.string("error") == "invalid_grant")
    }

    @Test func nativeSSOIssuesABoundDeviceSecretAndExchangesIt() async throws {
        let server = try await IdpSimServer.start(users: Self.users)
        let signIn = try await Self.signIn(server)
        let secret = try #require(signIn.string("device_secret"))
        let idToken = try #require(signIn.string("id_token"))
        let claims = try Self.claims(idToken)
        #expect(claims["ds_hash"] as? String == Self.dsHash(secret))
        let sid = try #require(claims["sid"] as? String)

        let exchanged = try await Self.nativeSSO(server, client: "calendar", idToken: idToken, secret: secret)
        #expect(exchanged.status == 200, "\(exchanged.text)")
        #expect(exchanged.string("issued_token_type") == "urn:ietf:params:oauth:token-type:access_token")
        #expect(exchanged.string("token_type") == "Bearer")
        #expect(exchanged.string("refresh_token") != nil)
        #expect(exchanged.json["device_secret"] == nil)
        let access = try Self.claims(exchanged.string("access_token"))
        #expect(access["azp"] as? String == "calendar" && access["appid"] as? String == "calendar")
        #expect((access["scp"] as? String)?.split(separator: " ").contains("User.Read") == true)
        let newId = try Self.claims(exchanged.string("id_token"))
        #expect(newId["aud"] as? String == "calendar" && newId["sid"] as? String == sid)
        let me = try await HTTP.get(
            server.baseURL + "/v1.0/me", headers: ["Authorization": "Bearer \(exchanged.string("access_token") ?? "")"])
        #expect(me.status == 200 && me.text.contains("Alice Example"))
        #expect(
            (try await HTTP.get(server.baseURL + "/test/stats").json["exchanges"] as? [String: Any])?["native-sso"]
                as? Int == 1)
    }

    @Test func nativeSSORefusesWhatDoesNotBelongTogether() async throws {
        let server = try await IdpSimServer.start(users: Self.users)
        let alice = try await Self.signIn(server)
        let carol = try await Self.signIn(server, username: "carol@contoso.test", password: "Carol#1")
        let (secret, idToken) = (alice.string("device_secret") ?? "", alice.string("id_token") ?? "")

        let wrongSecret = try await Self.nativeSSO(
            server, client: "calendar", idToken: idToken, secret: "not-a-device-secret")
        #expect(wrongSecret.status == 400 && wrongSecret.string("error") == "invalid_grant")
        // carol's ID token with alice's device secret: ds_hash does not match.
        let mismatched = try await Self.nativeSSO(
            server, client: "calendar", idToken: carol.string("id_token") ?? "", secret: secret)
        #expect(mismatched.status == 400 && mismatched.string("error") == "invalid_grant")
        #expect(mismatched.text.contains("ds_hash"))
        let forgedToken = try await Self.nativeSSO(server, client: "calendar", idToken: idToken + "x", secret: secret)
        #expect(forgedToken.status == 400 && forgedToken.string("error") == "invalid_grant")
        let locked = try await Self.nativeSSO(server, client: "locked", idToken: idToken, secret: secret)
        #expect(locked.status == 400 && locked.string("error") == "unauthorized_client")
        let badAudience = try await Self.nativeSSO(
            server, client: "calendar", idToken: idToken, secret: secret,
            extra: [("audience", "https://elsewhere.example")])
        #expect(badAudience.status == 400)

        // Revoked through RFC 7009: the session ends, every exchange with it is refused.
        let revoke = try await HTTP.postForm(
            server.authority + "/oauth2/v2.0/revoke",
            [("token", secret), ("token_type_hint", "device_secret"), ("client_id", "mail")])
        #expect(revoke.status == 200)
        let afterRevoke = try await Self.nativeSSO(server, client: "calendar", idToken: idToken, secret: secret)
        #expect(afterRevoke.status == 400 && afterRevoke.string("error") == "invalid_grant")

        // And the test endpoint revokes a user's device secrets.
        let carolSecret = carol.string("device_secret") ?? ""
        let admin = try await HTTP.postForm(
            server.baseURL + "/test/revoke-device-secrets?username=carol@contoso.test", [])
        #expect(admin.json["revokedDeviceSecrets"] as? Int == 1)
        let afterAdmin = try await Self.nativeSSO(
            server, client: "calendar", idToken: carol.string("id_token") ?? "", secret: carolSecret)
        #expect(afterAdmin.status == 400)
    }

    @Test func familyRefreshTokensAreRedeemedByTheFamilyWithoutConsumingThem() async throws {
        let server = try await IdpSimServer.start(users: Self.users, arguments: ["--without", "native-sso"])
        let signIn = try await Self.signIn(server)
        #expect(signIn.string("foci") == "1")
        let token = try #require(signIn.string("refresh_token"))
        let calendar = try await refreshGrant(server, token, clientId: "calendar")
        #expect(calendar.status == 200, "\(calendar.text)")
        #expect(try Self.claims(calendar.string("access_token"))["azp"] as? String == "calendar")
        #expect(calendar.string("foci") == "1")
        // Not consumed: mail's own refresh still works, and is no reuse.
        let own = try await refreshGrant(server, token, clientId: "mail")
        #expect(own.status == 200, "\(own.text)")
        let outsider = try await refreshGrant(server, token, clientId: "outsider")
        #expect(outsider.status == 400 && outsider.string("error") == "invalid_grant")
        let locked = try await refreshGrant(server, own.string("refresh_token") ?? "", clientId: "locked")
        #expect(locked.status == 400 && locked.string("error") == "unauthorized_client")
    }

    @Test func tokenExchangeTakesAnAccessOrRefreshTokenAsSubject() async throws {
        let server = try await IdpSimServer.start(users: Self.users, arguments: ["--without", "native-sso"])
        let signIn = try await Self.signIn(server)
        for (token, type) in [
            (signIn.string("access_token") ?? "", "access_token"),
            (signIn.string("refresh_token") ?? "", "refresh_token"),
        ] {
            let exchanged = try await HTTP.postForm(
                server.tokenURL,
                [
                    ("grant_type", Self.exchange), ("client_id", "outsider"), ("subject_token", token),
                    ("subject_token_type", "urn:ietf:params:oauth:token-type:\(type)"), ("scope", "openid User.Read"),
                    ("requested_token_type", "urn:ietf:params:oauth:token-type:access_token"),
                ])
            #expect(exchanged.status == 200, "\(type): \(exchanged.text)")
            #expect(try Self.claims(exchanged.string("access_token"))["azp"] as? String == "outsider")
            // Without offline_access, no refresh token: the broker exchanges again when it expires.
            #expect(exchanged.json["refresh_token"] == nil)
        }
        let bogus = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", Self.exchange), ("client_id", "outsider"), ("subject_token", "not-a-token"),
                ("subject_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ])
        #expect(bogus.status == 400 && bogus.string("error") == "invalid_grant")
        let locked = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", Self.exchange), ("client_id", "locked"),
                ("subject_token", signIn.string("access_token") ?? ""),
                ("subject_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ])
        #expect(locked.status == 400 && locked.string("error") == "unauthorized_client")
        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect((stats["exchanges"] as? [String: Any])?["token-exchange"] as? Int == 2)
    }
}
