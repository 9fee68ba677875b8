import Foundation
import JWTKit
import TestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

@Suite("idp-sim: discovery, grants, refresh, revocation, resources, faults and the users file")
struct ProviderTests {
    @Test func discoveryDocumentIsCompleteAndEveryURLAnswers() async throws {
        let server = try await IdpSimServer.start()
        let document = try await HTTP.get(server.authority + "/.well-known/openid-configuration")
        #expect(document.status == 200)
        let json = document.json
        #expect(json["issuer"] as? String == server.authority)
        #expect(json["token_endpoint"] as? String == server.authority + "/oauth2/v2.0/token")
        #expect(json["jwks_uri"] as? String == server.authority + "/discovery/v2.0/keys")
        #expect(json["authorization_endpoint"] as? String == server.authority + "/oauth2/v2.0/authorize")
        #expect(json["revocation_endpoint"] as? String == server.authority + "/oauth2/v2.0/revoke")
        #expect(json["end_session_endpoint"] as? String == server.authority + "/oauth2/v2.0/logout")
        #expect(json["userinfo_endpoint"] as? String == server.authority + "/oidc/userinfo")
        #expect(json["code_challenge_methods_supported"] as? [String] == ["S256"])
        #expect(
            Set(json["grant_types_supported"] as? [String] ?? []).isSuperset(of: [
                "password", "refresh_token", "authorization_code",
            ]))
        #expect(
            Set(json["token_endpoint_auth_methods_supported"] as? [String] ?? []) == [
                "none", "client_secret_basic", "client_secret_post",
            ])
        #expect((json["id_token_signing_alg_values_supported"] as? [String])?.isEmpty == false)
        #expect((json["scopes_supported"] as? [String])?.contains("openid") == true)
        #expect((json["response_types_supported"] as? [String])?.contains("code") == true)

        // Every advertised endpoint exists (no 404); POST-only ones are probed with POST.
        for key in ["jwks_uri", "userinfo_endpoint", "authorization_endpoint", "end_session_endpoint"] {
            let url = try #require(json[key] as? String)
            let answer = try await HTTP.get(url)
            #expect(answer.status != 404, "\(key) \(url) answered \(answer.status)")
        }
        for key in ["token_endpoint", "revocation_endpoint"] {
            let url = try #require(json[key] as? String)
            let answer = try await HTTP.postForm(url, [])
            #expect(answer.status == 400, "\(key) \(url) answered \(answer.status)")
        }
    }

    @Test func idTokenVerifiesAgainstJWKS() async throws {
        let server = try await IdpSimServer.start()
        let jwks = try await HTTP.get(server.authority + "/discovery/v2.0/keys")
        let keys = try #require(jwks.json["keys"] as? [[String: Any]])
        #expect(keys.count >= 1)
        for key in keys {
            #expect(key["kid"] as? String != nil)
            #expect(key["kty"] as? String != nil)
            #expect(key["use"] as? String == "sig")
            #expect(key["alg"] as? String != nil)
        }
        let collection = try await JWTKeyCollection().add(jwksJSON: jwks.text)

        let tokens = try await passwordGrant(server, extra: [("nonce", "n-123")])
        #expect(tokens.status == 200)
        let idToken = try #require(tokens.string("id_token"))
        let verified = try await collection.verify(idToken, as: VerifiedIDToken.self)
        #expect(verified.iss.value == server.authority)
        #expect(verified.aud.value == ["broker-app"])
        #expect(verified.tid == server.tenantId)
        #expect(verified.preferred_username == "alice@contoso.test")
        #expect(verified.nonce == "n-123")

        // A tampered token must not verify.
        var parts = idToken.split(separator: ".").map(String.init)
        parts[1] = parts[1].replacingOccurrences(of: "a", with: "b")
        await #expect(throws: (any Error).self) {
            _ = try await collection.verify(parts.joined(separator: "."), as: VerifiedIDToken.self)
        }
    }

    @Test func passwordGrantIssuesEntraShapedTokens() async throws {
        let server = try await IdpSimServer.start()
        let result = try await passwordGrant(server)
        #expect(result.status == 200)
        #expect(result.string("token_type") == "Bearer")
        #expect(result.json["expires_in"] as? Int == 3600)
        #expect(result.string("scope") == "openid profile offline_access User.Read")
        #expect(result.header("Cache-Control") == "no-store")
        let refresh = try #require(result.string("refresh_token"))
        #expect(refresh.split(separator: ".").count != 3, "refresh tokens are opaque, not JWTs")

        let access = jwtPayload(try #require(result.string("access_token")))
        #expect(access["iss"] as? String == server.authority)
        #expect(access["aud"] as? String == "https://graph.local")
        #expect(access["scp"] as? String == "openid profile offline_access User.Read")
        #expect(access["azp"] as? String == "broker-app")
        #expect(access["appid"] as? String == "broker-app")
        #expect(access["tid"] as? String == server.tenantId)
        #expect(access["preferred_username"] as? String == "alice@contoso.test")
        #expect(access["name"] as? String == "Alice Example")
        for claim in ["exp", "iat", "nbf", "sub", "oid"] { #expect(access[claim] != nil, "missing \(claim)") }

        let id = jwtPayload(try #require(result.string("id_token")))
        #expect(id["aud"] as? String == "broker-app")
        #expect(id["email"] as? String == "alice@contoso.test")
        #expect(id["oid"] as? String == access["oid"] as? String)
        #expect(id["nonce"] == nil)

        // The oid is stable: given in the file, or derived from the username.
        let again = jwtPayload(try #require(try await passwordGrant(server).string("id_token")))
        #expect(again["oid"] as? String == id["oid"] as? String)
        let carol = jwtPayload(
            try #require(
                try await passwordGrant(server, username: "carol@contoso.test", password: "Carol#1").string("id_token"))
        )
        #expect(carol["oid"] as? String == "00000000-0000-0000-0000-0000000000c0")
    }

    @Test func passwordGrantFailures() async throws {
        let server = try await IdpSimServer.start()
        let wrongPassword = try await passwordGrant(server, password: "nope")
        #expect(wrongPassword.status == 400)
        #expect(wrongPassword.string("error") == "invalid_grant")
        #expect(wrongPassword.string("error_description")?.isEmpty == false)
        #expect(wrongPassword.json["error_codes"] as? [Int] == [50126])

        let unknownUser = try await passwordGrant(server, username: "mallory@contoso.test")
        #expect(unknownUser.status == 400)
        #expect(unknownUser.string("error") == "invalid_grant")

        let unknownClient = try await passwordGrant(server, clientId: "who")
        #expect(unknownClient.status == 401)
        #expect(unknownClient.string("error") == "invalid_client")

        let unsupported = try await HTTP.postForm(
            server.tokenURL,
            [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("client_id", "broker-app")])
        #expect(unsupported.status == 400)
        #expect(unsupported.string("error") == "unsupported_grant_type")

        let missing = try await HTTP.postForm(server.tokenURL, [("client_id", "broker-app")])
        #expect(missing.string("error") == "invalid_request")
    }

    @Test func confidentialClientsMustAuthenticate() async throws {
        let server = try await IdpSimServer.start()
        let none = try await passwordGrant(server, clientId: "conf-app")
        #expect(none.status == 401)
        #expect(none.string("error") == "invalid_client")

        let wrong = try await passwordGrant(server, clientId: "conf-app", extra: [("client_secret", "bad")])
        #expect(wrong.status == 401)

        let post = try await passwordGrant(server, clientId: "conf-app", extra: [("client_secret", "s3cret")])
        #expect(post.status == 200)

        let basic = try await HTTP.postForm(
            server.tokenURL,
            [("grant_type", "password"), ("username", "alice@contoso.test"), ("password", "Passw0rd!")],
            headers: ["Authorization": "Basic " + Data("conf-app:s3cret".utf8).base64EncodedString()])
        #expect(basic.status == 200)
        #expect(jwtPayload(basic.string("access_token") ?? "")["azp"] as? String == "conf-app")

        // curl here: URLSession on Linux stalls on a 401 that carries `WWW-Authenticate: Basic`.
        let answer = try await runCommand(
            "/usr/bin/curl",
            [
                "-s", "-i", "-u", "conf-app:nope", "-d", "grant_type=password&username=alice%40contoso.test&password=x",
                server.tokenURL,
            ]
        ).stdout
        #expect(answer.hasPrefix("HTTP/1.1 401"))
        #expect(answer.lowercased().contains("www-authenticate: basic"))
        #expect(answer.contains("invalid_client"))
    }

    @Test func refreshTokensRotateAndReuseRevokesTheFamily() async throws {
        let server = try await IdpSimServer.start()
        let first = try #require(try await passwordGrant(server).string("refresh_token"))
        let rotated = try await refreshGrant(server, first)
        #expect(rotated.status == 200)
        let second = try #require(rotated.string("refresh_token"))
        #expect(second != first)
        #expect(rotated.string("id_token") != nil)

        // The successor works once ...
        let third = try #require(try await refreshGrant(server, second).string("refresh_token"))
        // ... replaying a rotated token fails and kills the whole family, including the newest token.
        let replay = try await refreshGrant(server, first)
        #expect(replay.status == 400)
        #expect(replay.string("error") == "invalid_grant")
        let afterReuse = try await refreshGrant(server, third)
        #expect(afterReuse.string("error") == "invalid_grant")

        // Another client cannot redeem someone else's refresh token.
        let fresh = try #require(try await passwordGrant(server).string("refresh_token"))
        let stolen = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "refresh_token"), ("client_id", "conf-app"),
                ("client_secret", "s3cret"), ("refresh_token", fresh),
            ])
        #expect(stolen.string("error") == "invalid_grant")
        #expect(try await refreshGrant(server, fresh).status == 200)
    }

    @Test func refreshMayNarrowButNotWidenScopes() async throws {
        let server = try await IdpSimServer.start()
        let token = try #require(
            try await passwordGrant(server, scope: "openid offline_access User.Read").string("refresh_token"))
        let narrowed = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "refresh_token"), ("client_id", "broker-app"),
                ("refresh_token", token), ("scope", "offline_access User.Read"),
            ])
        #expect(narrowed.status == 200)
        #expect(narrowed.string("scope") == "offline_access User.Read")
        #expect(narrowed.string("id_token") == nil)
        let widened = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "refresh_token"), ("client_id", "broker-app"),
                ("refresh_token", narrowed.string("refresh_token") ?? ""), ("scope", "Mail.Read offline_access"),
            ])
        #expect(widened.string("error") == "invalid_scope")
    }

    @Test func revocationEndpoint() async throws {
        let server = try await IdpSimServer.start()
        let token = try #require(try await passwordGrant(server).string("refresh_token"))
        let revoke = try await HTTP.postForm(
            server.authority + "/oauth2/v2.0/revoke",
            [("token", token), ("token_type_hint", "refresh_token"), ("client_id", "broker-app")])
        #expect(revoke.status == 200)
        #expect(try await refreshGrant(server, token).string("error") == "invalid_grant")
        // Unknown tokens are not an error (RFC 7009 §2.2).
        let unknown = try await HTTP.postForm(
            server.authority + "/oauth2/v2.0/revoke", [("token", "nonsense"), ("client_id", "broker-app")])
        #expect(unknown.status == 200)
    }

    @Test func adminRevokeAllKillsEveryRefreshTokenOfTheUser() async throws {
        let server = try await IdpSimServer.start()
        let a = try #require(try await passwordGrant(server).string("refresh_token"))
        let b = try #require(try await passwordGrant(server).string("refresh_token"))
        let carol = try #require(
            try await passwordGrant(server, username: "carol@contoso.test", password: "Carol#1").string("refresh_token")
        )
        let result = try await HTTP.send(
            "POST", server.baseURL + "/test/revoke-all?username=alice%40contoso.test", headers: [:], body: nil)
        #expect(result.status == 200)
        #expect(result.json["revokedFamilies"] as? Int == 2)
        #expect(try await refreshGrant(server, a).string("error") == "invalid_grant")
        #expect(try await refreshGrant(server, b).string("error") == "invalid_grant")
        #expect(try await refreshGrant(server, carol).status == 200)
    }

    @Test func meEndpointChecksTokenAndScope() async throws {
        let server = try await IdpSimServer.start()
        let me = server.baseURL + "/v1.0/me"
        let access = try #require(try await passwordGrant(server).string("access_token"))
        let ok = try await HTTP.get(me, headers: ["Authorization": "Bearer \(access)"])
        #expect(ok.status == 200)
        #expect(ok.string("userPrincipalName") == "alice@contoso.test")
        #expect(ok.string("displayName") == "Alice Example")
        #expect(ok.string("mail") == "alice@contoso.test")
        #expect(ok.string("id") == jwtPayload(access)["oid"] as? String)

        let anonymous = try await HTTP.get(me)
        #expect(anonymous.status == 401)
        #expect(anonymous.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)

        let forged = try await HTTP.get(me, headers: ["Authorization": "Bearer \(access.dropLast(4))AAAA"])
        #expect(forged.status == 401)
        #expect(forged.header("WWW-Authenticate")?.contains("error=\"invalid_token\"") == true)

        let noScope = try #require(try await passwordGrant(server, scope: "openid profile").string("access_token"))
        let denied = try await HTTP.get(me, headers: ["Authorization": "Bearer \(noScope)"])
        #expect(denied.status == 403)
        #expect(denied.header("WWW-Authenticate")?.contains("insufficient_scope") == true)

        let userinfo = try await HTTP.get(
            server.authority + "/oidc/userinfo", headers: ["Authorization": "Bearer \(access)"])
        #expect(userinfo.status == 200)
        #expect(userinfo.string("preferred_username") == "alice@contoso.test")
        #expect(userinfo.string("email") == "alice@contoso.test")
        #expect(userinfo.string("sub") == jwtPayload(access)["sub"] as? String)
    }

    @Test func tokensFromAnotherRunAreRejected() async throws {
        let first = try await IdpSimServer.start()
        let access = try #require(try await passwordGrant(first).string("access_token"))
        let second = try await IdpSimServer.start()
        let answer = try await HTTP.get(second.baseURL + "/v1.0/me", headers: ["Authorization": "Bearer \(access)"])
        #expect(answer.status == 401)
    }

    @Test func expiredAccessTokensAreRejected() async throws {
        let server = try await IdpSimServer.start(arguments: ["--access-token-lifetime", "1"])
        let result = try await passwordGrant(server)
        #expect(result.json["expires_in"] as? Int == 1)
        let access = try #require(result.string("access_token"))
        try await Task.sleep(for: .milliseconds(2100))
        let answer = try await HTTP.get(server.baseURL + "/v1.0/me", headers: ["Authorization": "Bearer \(access)"])
        #expect(answer.status == 401)
    }

    @Test func statsCountRequestsPerGrantAndEndpoint() async throws {
        let server = try await IdpSimServer.start()
        let token = try #require(try await passwordGrant(server).string("refresh_token"))
        _ = try await passwordGrant(server, password: "wrong")
        _ = try await refreshGrant(server, token)
        _ = try await HTTP.postForm(
            server.authority + "/oauth2/v2.0/revoke", [("token", token), ("client_id", "broker-app")])
        _ = try await HTTP.get(server.authority + "/.well-known/openid-configuration")
        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        let tokenCounts = stats["token"] as? [String: Int]
        #expect(tokenCounts?["password"] == 2)
        #expect(tokenCounts?["refresh_token"] == 1)
        #expect(stats["revoke"] as? Int == 1)
        #expect(stats["discovery"] as? Int == 1)

        _ = try await HTTP.send("POST", server.baseURL + "/test/stats/reset", headers: [:], body: nil)
        let reset = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect((reset["token"] as? [String: Int])?.isEmpty == true)
    }

    @Test func faultModesAffectTheTokenEndpoint() async throws {
        let server = try await IdpSimServer.start()
        let faults = server.baseURL + "/test/faults"

        #expect(try await HTTP.postJSON(faults, #"{"mode":"unavailable","retryAfter":7}"#).status == 200)
        let unavailable = try await passwordGrant(server)
        #expect(unavailable.status == 503)
        #expect(unavailable.header("Retry-After") == "7")

        _ = try await HTTP.postJSON(faults, #"{"mode":"garbage"}"#)
        let garbage = try await passwordGrant(server)
        #expect(garbage.status == 200)
        #expect((try? JSONSerialization.jsonObject(with: garbage.body)) == nil)

        _ = try await HTTP.postJSON(faults, #"{"mode":"error500"}"#)
        #expect(try await passwordGrant(server).status == 500)

        _ = try await HTTP.postJSON(faults, #"{"mode":"slow","delayMs":400}"#)
        let start = Date()
        #expect(try await passwordGrant(server).status == 200)
        #expect(Date().timeIntervalSince(start) >= 0.35)

        // A counted fault applies to the next N requests only: a refresh token is not consumed by a 503.
        _ = try await HTTP.postJSON(faults, #"{"mode":"none"}"#)
        let token = try #require(try await passwordGrant(server).string("refresh_token"))
        _ = try await HTTP.postJSON(faults, #"{"mode":"unavailable","count":1}"#)
        #expect(try await refreshGrant(server, token).status == 503)
        #expect(try await refreshGrant(server, token).status == 200)

        #expect(try await HTTP.postJSON(faults, #"{"mode":"bogus"}"#).status == 400)
    }

    @Test func badUsersFilesFailWithAClearMessage() async throws {
        let directory = try TemporaryDirectory()
        let cases: [(String, String?)] = [
            ("missing", nil),
            ("not json", "{ this is not json"),
            ("missing key", #"{"tenantId": "t", "users": [{"username": "a", "password": "p"}], "clients": []}"#),
            (
                "duplicate",
                #"{"tenantId": "t", "users": [{"username": "a", "password": "p", "displayName": "A"}, {"username": "A", "password": "p", "displayName": "A"}], "clients": []}"#
            ),
        ]
        for (index, (name, content)) in cases.enumerated() {
            let file = directory.path + "/users-\(index).json"
            if let content { _ = try directory.write("users-\(index).json", content) }
            let run = try await runCommand(Binaries.path("idp-sim"), ["--port", "0", "--users", file])
            #expect(run.status != 0, "\(name)")
            #expect(run.stderr.contains("users file"), "\(name): \(run.stderr)")
        }
    }

    @Test func exitsCleanlyOnSIGTERM() async throws {
        let server = try await IdpSimServer.start()
        #expect(try await HTTP.get(server.authority + "/.well-known/openid-configuration").status == 200)
        #expect(try server.stop() == 0)
    }
}
