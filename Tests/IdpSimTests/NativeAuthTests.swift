import Crypto
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Native authentication helpers (Entra's initiate → challenge → token sequence).
extension IdpSimServer {
    func initiate(_ username: String, types: String = "oob password redirect", clientId: String = "broker-app")
        async throws -> HTTPResult
    {
        try await HTTP.postForm(
            authority + "/oauth2/v2.0/initiate",
            [("client_id", clientId), ("challenge_type", types), ("username", username)])
    }

    func challenge(_ continuation: String, types: String = "oob password redirect") async throws -> HTTPResult {
        try await HTTP.postForm(
            authority + "/oauth2/v2.0/challenge",
            [("client_id", "broker-app"), ("challenge_type", types), ("continuation_token", continuation)])
    }

    func oob(_ code: String, _ continuation: String) async throws -> HTTPResult {
        try await HTTP.postForm(
            tokenURL,
            [
                ("grant_type", "oob"), ("client_id", "broker-app"), ("oob", code),
                ("continuation_token", continuation), ("scope", "openid offline_access User.Read"),
            ])
    }

    func outbox() async throws -> [[String: Any]] {
        let result = try await HTTP.get(baseURL + "/test/outbox")
        return (try? JSONSerialization.jsonObject(with: result.body)) as? [[String: Any]] ?? []
    }

    func lastCode(for username: String) async throws -> String {
        let message = try await outbox().last { $0["username"] as? String == username }
        return try #require(message?["code"] as? String)
    }
}

@Suite("idp-sim native authentication")
struct NativeAuthTests {
    @Test func emailCodeSignInWithWrongThenRightCode() async throws {
        let server = try await IdpSimServer.start()
        let started = try await server.initiate("bob@contoso.test")
        #expect(started.status == 200)
        let first = try #require(started.string("continuation_token"))

        let challenge = try await server.challenge(first)
        #expect(challenge.status == 200)
        #expect(challenge.string("challenge_type") == "oob")
        #expect(challenge.string("binding_method") == "prompt")
        #expect(challenge.string("challenge_channel") == "email")
        #expect(challenge.string("challenge_target_label") == "b***@c***.test")
        #expect(challenge.json["code_length"] as? Int == 8)
        let continuation = try #require(challenge.string("continuation_token"))

        let code = try await server.lastCode(for: "bob@contoso.test")
        #expect(code.count == 8)
        let sentAt = try #require(try await server.outbox().last?["sentAt"] as? Int)
        #expect(abs(Double(sentAt) - Date().timeIntervalSince1970) < 60)

        let wrongCode = code == "00000000" ? "11111111" : "00000000"
        let wrong = try await server.oob(wrongCode, continuation)
        #expect(wrong.status == 400)
        #expect(wrong.string("error") == "invalid_grant")
        #expect(wrong.string("suberror") == "invalid_oob_value")

        // The continuation token survives a wrong code.
        let right = try await server.oob(code, continuation)
        #expect(right.status == 200)
        let id = jwtPayload(try #require(right.string("id_token")))
        #expect(id["preferred_username"] as? String == "bob@contoso.test")
        #expect(right.string("refresh_token") != nil)

        // ... but the flow is over once tokens were issued.
        #expect(try await server.oob(code, continuation).status == 400)
        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect((stats["token"] as? [String: Int])?["oob"] == 3)
        #expect(stats["initiate"] as? Int == 1)
    }

    @Test func expiredCodeAndResend() async throws {
        // 6 s: long enough that the resent code is still fresh with every suite running at once on
        // two cores (3 s was not, once), short enough to wait out.
        let server = try await IdpSimServer.start(arguments: ["--code-lifetime", "6"])
        let first = try #require(try await server.initiate("bob@contoso.test").string("continuation_token"))
        let continuation = try #require(try await server.challenge(first).string("continuation_token"))
        let oldCode = try await server.lastCode(for: "bob@contoso.test")
        try await Task.sleep(for: .milliseconds(6200))
        let expired = try await server.oob(oldCode, continuation)
        #expect(expired.status == 400)
        #expect(expired.string("error") == "expired_token")

        // Resend: a new challenge sends a fresh code, which works (within its lifetime).
        let resent = try #require(try await server.challenge(continuation).string("continuation_token"))
        #expect(try await server.outbox().count == 2)
        let newCode = try await server.lastCode(for: "bob@contoso.test")
        let result = try await server.oob(newCode, resent)
        #expect(result.status == 200, "\(result.text)")
    }

    @Test func resendInvalidatesTheEarlierCode() async throws {
        let server = try await IdpSimServer.start()
        let first = try #require(try await server.initiate("bob@contoso.test").string("continuation_token"))
        let continuation = try #require(try await server.challenge(first).string("continuation_token"))
        let oldCode = try await server.lastCode(for: "bob@contoso.test")
        let resent = try #require(try await server.challenge(continuation).string("continuation_token"))
        let newCode = try await server.lastCode(for: "bob@contoso.test")
        if oldCode != newCode {
            #expect(try await server.oob(oldCode, resent).string("suberror") == "invalid_oob_value")
        }
        #expect(try await server.oob(newCode, resent).status == 200)
    }

    @Test func passwordChallengeAndErrors() async throws {
        let server = try await IdpSimServer.start()
        let first = try #require(try await server.initiate("carol@contoso.test").string("continuation_token"))
        let challenge = try await server.challenge(first)
        #expect(challenge.string("challenge_type") == "password")
        let continuation = try #require(challenge.string("continuation_token"))
        func password(_ value: String) async throws -> HTTPResult {
            try await HTTP.postForm(
                server.tokenURL,
                [
                    ("grant_type", "password"), ("client_id", "broker-app"), ("password", value),
                    ("continuation_token", continuation), ("scope", "openid offline_access"),
                ])
        }
        let wrong = try await password("nope")
        #expect(wrong.string("error") == "invalid_grant")
        let right = try await password("Carol#1")
        #expect(right.status == 200)

        // Carol can also use an email code when the client does not offer password.
        let otpStart = try #require(
            try await server.initiate("carol@contoso.test", types: "oob redirect").string("continuation_token"))
        #expect(try await server.challenge(otpStart, types: "oob redirect").string("challenge_type") == "oob")

        // Unknown user, unsatisfiable challenge types, missing redirect, unknown client, bogus continuation token.
        let unknown = try await server.initiate("nobody@contoso.test")
        #expect(unknown.status == 400)
        #expect(unknown.string("error") == "user_not_found")
        #expect(
            try await server.initiate("bob@contoso.test", types: "password redirect").string("challenge_type")
                == "redirect")
        #expect(
            try await server.initiate("alice@contoso.test", types: "oob redirect").string("challenge_type")
                == "redirect")
        #expect(try await server.initiate("bob@contoso.test", types: "oob").string("error") == "invalid_request")
        #expect(try await server.initiate("bob@contoso.test", clientId: "nope").status == 400)
        #expect(try await server.challenge("bogus").status == 400)
    }
}
