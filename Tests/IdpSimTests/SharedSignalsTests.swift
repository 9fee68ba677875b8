import Foundation
import JWTKit
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// idp-sim as a Shared Signals transmitter (SSF 1.0, poll delivery) and a CAE provider, over real
/// HTTP: the client credentials grant its receivers use, streams, SETs verified against the JWKS,
/// the administrator's actions that cause them, hostile SETs, and claims challenges.
@Suite("idp-sim: client credentials, Shared Signals transmitter, administrator actions, CAE")
struct SharedSignalsTests {
    static let allEvents = [
        "https://schemas.openid.net/secevent/caep/event-type/session-revoked",
        "https://schemas.openid.net/secevent/caep/event-type/credential-change",
        "https://schemas.openid.net/secevent/risc/event-type/account-disabled",
    ]
    static let capable = #"{"access_token":{"xms_cc":{"values":["cp1"]}}}"#

    /// The fields of a SET the tests check after JWTKit verified its signature.
    struct VerifiedSET: JWTPayload {
        var iss: String
        var aud: String
        var iat: Int
        var jti: String
        func verify(using _: some JWTAlgorithm) async throws {}
    }

    static func appToken(
        _ server: IdpSimServer, clientId: String = "conf-app", secret: String? = "s3cret",
        scope: String = "https://ssf.local/.default"
    ) async throws -> HTTPResult {
        var parameters = [("grant_type", "client_credentials"), ("client_id", clientId), ("scope", scope)]
        if let secret { parameters.append(("client_secret", secret)) }
        return try await HTTP.postForm(server.tokenURL, parameters)
    }

    static func bearer(_ server: IdpSimServer) async throws -> String {
        try #require(try await appToken(server).string("access_token"))
    }

    static func call(
        _ method: String, _ url: String, token: String?, json: String? = nil
    ) async throws -> HTTPResult {
        var headers = ["Content-Type": "application/json"]
        if let token { headers["Authorization"] = "Bearer \(token)" }
        return try await HTTP.send(method, url, headers: headers, body: json.map { Data($0.utf8) })
    }

    static func createStream(_ server: IdpSimServer, token: String, events: [String] = allEvents) async throws
        -> HTTPResult
    {
        let list = events.map { "\"\($0)\"" }.joined(separator: ",")
        return try await call(
            "POST", server.authority + "/ssf/streams", token: token,
            json: #"{"delivery":{"method":"urn:ietf:rfc:8936"},"events_requested":[\#(list)],"description":"t"}"#)
    }

    /// Polls the stream: the SETs by jti and `moreAvailable`.
    static func poll(_ endpoint: String, token: String, _ body: String = "{}") async throws -> (
        sets: [String: String], more: Bool, status: Int
    ) {
        let answer = try await call("POST", endpoint, token: token, json: body)
        return (
            answer.json["sets"] as? [String: String] ?? [:], answer.json["moreAvailable"] as? Bool ?? false,
            answer.status
        )
    }

    static func post(_ server: IdpSimServer, _ path: String) async throws -> HTTPResult {
        try await HTTP.postForm(server.baseURL + path, [])
    }

    static func keys(_ server: IdpSimServer) async throws -> JWTKeyCollection {
        try await JWTKeyCollection().add(jwksJSON: HTTP.get(server.authority + "/discovery/v2.0/keys").text)
    }

    static func header(_ jwt: String) -> [String: Any] {
        var base64 = String(jwt.split(separator: ".").first ?? "")
            .replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64) else { return [:] }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
    }

    /// A started server with a stream of conf-app requesting `events`: the token and the poll URL.
    static func withStream(_ arguments: [String] = [], events: [String] = allEvents) async throws -> (
        IdpSimServer, String, String
    ) {
        let server = try await IdpSimServer.start(arguments: arguments)
        let token = try await bearer(server)
        let created = try await createStream(server, token: token, events: events)
        #expect(created.status == 201)
        let delivery = try #require(created.json["delivery"] as? [String: Any])
        return (server, token, try #require(delivery["endpoint_url"] as? String))
    }

    // MARK: - Client credentials

    @Test func clientCredentialsGiveAnAppTokenToConfidentialClientsOnly() async throws {
        let server = try await IdpSimServer.start()
        let answer = try await Self.appToken(server)
        #expect(answer.status == 200)
        #expect(answer.string("token_type") == "Bearer")
        #expect(answer.json["expires_in"] as? Int == 3600)
        #expect(answer.json["refresh_token"] == nil)
        #expect(answer.json["id_token"] == nil)
        let claims = jwtPayload(try #require(answer.string("access_token")))
        #expect(claims["aud"] as? String == "https://ssf.local")
        #expect(claims["azp"] as? String == "conf-app")
        #expect(claims["appid"] as? String == "conf-app")
        #expect(claims["idtyp"] as? String == "app")
        #expect(claims["iss"] as? String == server.authority)
        #expect(claims["sub"] as? String != nil)
        #expect(claims["sub"] as? String == claims["oid"] as? String)
        #expect(claims["preferred_username"] == nil)
        #expect(claims["scp"] == nil)

        let api = try await Self.appToken(server, scope: "https://graph.microsoft.com/.default")
        #expect(jwtPayload(try #require(api.string("access_token")))["aud"] as? String == "https://graph.local")

        let publicClient = try await Self.appToken(server, clientId: "broker-app", secret: nil)
        #expect(publicClient.status == 400)
        #expect(publicClient.string("error") == "unauthorized_client")
        let wrongSecret = try await Self.appToken(server, secret: "nope")
        #expect(wrongSecret.status == 401)

        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect((stats["token"] as? [String: Int])?["client_credentials"] == 4)
        let discovery = try await HTTP.get(server.authority + "/.well-known/openid-configuration").json
        #expect((discovery["grant_types_supported"] as? [String])?.contains("client_credentials") == true)
    }
}
