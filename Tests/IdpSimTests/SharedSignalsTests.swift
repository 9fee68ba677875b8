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

    // MARK: - Transmitter

    @Test func metadataIsAtTheWellKnownPathBeforeTheIssuersPath() async throws {
        let server = try await IdpSimServer.start()
        let path = "/.well-known/ssf-configuration/\(server.tenantId)/v2.0"
        let metadata = try await HTTP.get(server.baseURL + path)
        #expect(metadata.status == 200)
        let json = metadata.json
        #expect(json["spec_version"] as? String == "1_0")
        #expect(json["issuer"] as? String == server.authority)
        #expect(json["jwks_uri"] as? String == server.authority + "/discovery/v2.0/keys")
        #expect(json["delivery_methods_supported"] as? [String] == ["urn:ietf:rfc:8936"])
        #expect(json["configuration_endpoint"] as? String == server.authority + "/ssf/streams")
        #expect(json["status_endpoint"] as? String == server.authority + "/ssf/status")
        #expect(json["verification_endpoint"] as? String == server.authority + "/ssf/verify")
        #expect(json["authorization_schemes"] as? [[String: String]] == [["spec_urn": "urn:ietf:rfc:6749"]])
        #expect(json["default_subjects"] as? String == "ALL")

        let plain = try await IdpSimServer.start(arguments: ["--without", "shared-signals"])
        #expect(try await HTTP.get(plain.baseURL + path).status == 404)
        let token = try await Self.bearer(plain)
        #expect(try await Self.createStream(plain, token: token).status == 404)
    }

    @Test func streamsAreCreatedOncePerClientReadAndDeleted() async throws {
        let server = try await IdpSimServer.start()
        let streams = server.authority + "/ssf/streams"
        let none = try await Self.call("GET", streams, token: nil)
        #expect(none.status == 401)
        #expect(none.header("WWW-Authenticate")?.contains(#"error="invalid_token""#) == true)
        let userToken = try #require(try await passwordGrant(server).string("access_token"))
        #expect(try await Self.call("GET", streams, token: userToken).status == 401)

        let token = try await Self.bearer(server)
        let push = try await Self.call(
            "POST", streams, token: token, json: #"{"delivery":{"method":"urn:ietf:rfc:8935"}}"#)
        #expect(push.status == 400)
        #expect(push.string("err") == "invalid_request")

        let requested = Self.allEvents.prefix(1) + ["https://example.com/unknown"]
        let created = try await Self.createStream(server, token: token, events: Array(requested))
        #expect(created.status == 201)
        let id = try #require(created.string("stream_id"))
        #expect(created.string("iss") == server.authority)
        #expect(created.string("aud") == "conf-app")
        #expect(created.string("description") == "t")
        let delivery = try #require(created.json["delivery"] as? [String: String])
        #expect(delivery["method"] == "urn:ietf:rfc:8936")
        #expect(delivery["endpoint_url"] == server.authority + "/ssf/poll/" + id)
        #expect(created.json["events_supported"] as? [String] == Self.allEvents)
        #expect(created.json["events_requested"] as? [String] == Array(requested))
        #expect(created.json["events_delivered"] as? [String] == [Self.allEvents[0]])

        #expect(try await Self.createStream(server, token: token).status == 409)
        let list = try await Self.call("GET", streams, token: token)
        let array = try #require(try JSONSerialization.jsonObject(with: list.body) as? [[String: Any]])
        #expect(array.map { $0["stream_id"] as? String } == [id])
        #expect(try await Self.call("GET", streams + "?stream_id=\(id)", token: token).string("stream_id") == id)
        #expect(try await Self.call("GET", streams + "?stream_id=other", token: token).status == 404)
        let status = try await Self.call("GET", server.authority + "/ssf/status?stream_id=\(id)", token: token)
        #expect(status.string("status") == "enabled")
        #expect(status.string("stream_id") == id)

        #expect(try await Self.call("DELETE", streams + "?stream_id=\(id)", token: token).status == 204)
        #expect(try await Self.call("GET", streams + "?stream_id=\(id)", token: token).status == 404)
        #expect(try await Self.poll(server.authority + "/ssf/poll/" + id, token: token).status == 404)
        #expect(try await Self.createStream(server, token: token).status == 201)
    }

    @Test func revokingSessionsQueuesAVerifiableSETUntilItIsAcknowledged() async throws {
        let (server, token, endpoint) = try await Self.withStream()
        let refresh = try #require(try await passwordGrant(server).string("refresh_token"))
        let revoked = try await Self.post(server, "/test/revoke-sessions?username=alice@contoso.test")
        #expect(revoked.status == 200)
        #expect(revoked.json["revokedFamilies"] as? Int == 1)
        #expect(revoked.json["queuedEvents"] as? Int == 1)
        #expect(try await refreshGrant(server, refresh).status == 400)
        #expect(try await Self.post(server, "/test/revoke-sessions?username=nobody@contoso.test").status == 404)

        let first = try await Self.poll(endpoint, token: token)
        #expect(first.sets.count == 1)
        #expect(first.more == false)
        let (jti, set) = try #require(first.sets.first)
        let verified = try await Self.keys(server).verify(set, as: VerifiedSET.self)
        #expect(verified.jti == jti)
        #expect(verified.iss == server.authority)
        #expect(verified.aud == "conf-app")
        #expect(abs(verified.iat - Int(Date().timeIntervalSince1970)) < 60)
        let header = Self.header(set)
        #expect(header["typ"] as? String == "secevent+jwt")
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String != nil)
        let claims = jwtPayload(set)
        let subject = try #require(claims["sub_id"] as? [String: Any])
        #expect(subject["format"] as? String == "complex")
        #expect(subject["user"] as? [String: String] == ["format": "email", "email": "alice@contoso.test"])
        #expect(subject["tenant"] as? [String: String] == ["format": "opaque", "id": server.tenantId])
        let events = try #require(claims["events"] as? [String: [String: Any]])
        #expect(events.count == 1)
        let event = try #require(events[Self.allEvents[0]])
        #expect(event["initiating_entity"] as? String == "admin")
        #expect(event["event_timestamp"] as? Int != nil)
        #expect((event["reason_admin"] as? [String: String])?["en"] != nil)

        let again = try await Self.poll(endpoint, token: token)
        #expect(again.sets == first.sets)
        let acked = try await Self.poll(endpoint, token: token, #"{"ack":["\#(jti)"],"returnImmediately":true}"#)
        #expect(acked.sets.isEmpty)
        let listing = try await HTTP.get(server.baseURL + "/test/ssf/streams")
        let stream = try #require((try JSONSerialization.jsonObject(with: listing.body) as? [[String: Any]])?.first)
        #expect(stream["queued"] as? Int == 0)
        #expect(stream["acked"] as? Int == 1)
        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect(stats["ssf-poll"] as? Int == 3)

        _ = try await Self.post(server, "/test/change-credential?username=alice@contoso.test")
        let change = try await Self.poll(endpoint, token: token, #"{"maxEvents":1}"#)
        let changeSET = try #require(change.sets.first?.value)
        let payload = try #require(jwtPayload(changeSET)["events"] as? [String: Any])
        let credential = try #require(payload[Self.allEvents[1]] as? [String: Any])
        #expect(credential["credential_type"] as? String == "password")
        #expect(credential["change_type"] as? String == "update")
    }

    @Test func onlyRequestedEventsAreQueuedAndStatusGovernsDelivery() async throws {
        let (server, token, endpoint) = try await Self.withStream(events: [Self.allEvents[0]])
        let change = try await Self.post(server, "/test/change-credential?username=alice@contoso.test")
        #expect(change.json["queuedEvents"] as? Int == 0)

        #expect(
            try await HTTP.postJSON(server.baseURL + "/test/ssf/stream-status", #"{"status":"paused"}"#).status == 200)
        _ = try await Self.post(server, "/test/revoke-sessions?username=alice@contoso.test")
        #expect(try await Self.poll(endpoint, token: token).sets.isEmpty)
        let status = try await Self.call("GET", server.authority + "/ssf/status", token: token)
        #expect(status.string("status") == "paused")
        _ = try await HTTP.postJSON(server.baseURL + "/test/ssf/stream-status", #"{"status":"enabled"}"#)
        #expect(try await Self.poll(endpoint, token: token).sets.count == 1)

        _ = try await HTTP.postJSON(
            server.baseURL + "/test/ssf/stream-status", #"{"status":"disabled","reason":"maintenance"}"#)
        _ = try await Self.post(server, "/test/revoke-sessions?username=alice@contoso.test")
        #expect(try await Self.poll(endpoint, token: token).sets.isEmpty)
        let disabled = try await Self.call("GET", server.authority + "/ssf/status", token: token)
        #expect(disabled.string("status") == "disabled")
        #expect(disabled.string("reason") == "maintenance")

        #expect(try await Self.post(server, "/test/ssf/delete-streams").json["deleted"] as? Int == 1)
        #expect(try await Self.poll(endpoint, token: token).status == 404)
    }

    @Test func pollsFailAsTheFaultSays() async throws {
        let (server, token, endpoint) = try await Self.withStream()
        let fault = #"{"mode":"unavailable","endpoint":"ssf","count":1}"#
        #expect(try await HTTP.postJSON(server.baseURL + "/test/faults", fault).status == 200)
        #expect(try await Self.poll(endpoint, token: token).status == 503)
        #expect(try await Self.poll(endpoint, token: token).status == 200)
    }

    @Test func disabledAccountsCannotSignInUntilEnabled() async throws {
        let (server, token, endpoint) = try await Self.withStream()
        let disabled = try await Self.post(server, "/test/disable-account?username=alice@contoso.test")
        #expect(disabled.json["queuedEvents"] as? Int == 1)
        let refused = try await passwordGrant(server)
        #expect(refused.status == 400)
        #expect(refused.string("error") == "invalid_grant")
        #expect(refused.json["error_codes"] as? [Int] == [50057])
        let set = try #require(try await Self.poll(endpoint, token: token).sets.first?.value)
        #expect((jwtPayload(set)["events"] as? [String: Any])?[Self.allEvents[2]] != nil)

        _ = try await Self.post(server, "/test/enable-account?username=alice@contoso.test")
        #expect(try await passwordGrant(server).status == 200)
    }

    @Test(arguments: ["wrongKey", "wrongAudience", "wrongIssuer", "expired", "none"])
    func injectedSETsAreHostileAsNamed(forgery: String) async throws {
        let (server, token, endpoint) = try await Self.withStream()
        let refresh = try #require(try await passwordGrant(server).string("refresh_token"))
        let injected = try await HTTP.postJSON(
            server.baseURL + "/test/ssf/inject",
            #"{"username":"alice@contoso.test","event":"session-revoked","forgery":"\#(forgery)"}"#)
        #expect(injected.json["queued"] as? Int == 1)
        #expect(try await refreshGrant(server, refresh).status == 200)
        let (jti, set) = try #require(try await Self.poll(endpoint, token: token).sets.first)
        #expect(jti == injected.string("jti"))
        let keys = try await Self.keys(server)
        let verified = try? await keys.verify(set, as: VerifiedSET.self)
        let claims = jwtPayload(set)
        switch forgery {
        case "wrongKey":
            #expect(verified == nil)
            #expect(Self.header(set)["kid"] as? String != nil)
        case "wrongAudience":
            #expect(verified != nil)
            #expect(claims["aud"] as? String != "conf-app")
        case "wrongIssuer":
            #expect(claims["iss"] as? String != server.authority)
        case "expired":
            #expect((claims["iat"] as? Int ?? .max) < Int(Date().timeIntervalSince1970) - 86400)
        default:
            #expect(verified?.aud == "conf-app")
            #expect(verified?.iss == server.authority)
        }
    }

    @Test func aReplayQueuesTheLastDeliveredSETAgain() async throws {
        let (server, token, endpoint) = try await Self.withStream()
        let none = try await HTTP.postJSON(
            server.baseURL + "/test/ssf/inject", #"{"username":"alice@contoso.test","event":"session-revoked"}"#)
        #expect(none.json["queued"] as? Int == 1)
        let (jti, set) = try #require(try await Self.poll(endpoint, token: token).sets.first)
        _ = try await Self.poll(endpoint, token: token, #"{"ack":["\#(jti)"]}"#)
        let replay = try await HTTP.postJSON(
            server.baseURL + "/test/ssf/inject",
            #"{"username":"alice@contoso.test","event":"session-revoked","forgery":"replay"}"#)
        #expect(replay.string("jti") == jti)
        #expect(try await Self.poll(endpoint, token: token).sets == [jti: set])
    }

    @Test func verificationQueuesAnEventWithTheReceiversState() async throws {
        let (server, token, endpoint) = try await Self.withStream()
        let id = try #require(endpoint.split(separator: "/").last.map(String.init))
        let answer = try await Self.call(
            "POST", server.authority + "/ssf/verify", token: token, json: #"{"stream_id":"\#(id)","state":"s-1"}"#)
        #expect(answer.status == 204)
        let claims = jwtPayload(try #require(try await Self.poll(endpoint, token: token).sets.first?.value))
        #expect(claims["sub_id"] as? [String: String] == ["format": "opaque", "id": id])
        let events = claims["events"] as? [String: [String: String]]
        #expect(events?["https://schemas.openid.net/secevent/ssf/event-type/verification"] == ["state": "s-1"])
    }

    // MARK: - Continuous Access Evaluation

    @Test func aCapableTokenIssuedBeforeARevocationIsChallenged() async throws {
        let server = try await IdpSimServer.start()
        let me = server.baseURL + "/v1.0/me"
        let signIn = try await passwordGrant(server, extra: [("claims", Self.capable)])
        let capable = try #require(signIn.string("access_token"))
        #expect(jwtPayload(capable)["xms_cc"] as? [String] == ["cp1"])
        let plain = try #require(try await passwordGrant(server).string("access_token"))
        #expect(jwtPayload(plain)["xms_cc"] == nil)
        #expect(try await HTTP.get(me, headers: ["Authorization": "Bearer \(capable)"]).status == 200)

        let required = try await Self.post(server, "/test/require-fresh-tokens?username=alice@contoso.test")
        let revokedAt = try #require(required.json["revokedAt"] as? Int)
        let challenged = try await HTTP.get(me, headers: ["Authorization": "Bearer \(capable)"])
        #expect(challenged.status == 401)
        let header = try #require(challenged.header("WWW-Authenticate"))
        #expect(header.hasPrefix(#"Bearer realm="", authorization_uri="\#(server.authority)/oauth2/v2.0/authorize""#))
        #expect(header.contains(#"error="insufficient_claims""#))
        let encoded = try #require(header.components(separatedBy: #"claims=""#).last?.dropLast())
        let decoded = String(decoding: try #require(Data(base64Encoded: String(encoded))), as: UTF8.self)
        #expect(decoded == #"{"access_token":{"nbf":{"essential":true,"value":"\#(revokedAt)"}}}"#)
        // Without the capability a token is honoured until it expires.
        #expect(try await HTTP.get(me, headers: ["Authorization": "Bearer \(plain)"]).status == 200)

        let claims = #"{"access_token":{"xms_cc":{"values":["cp1"]},"nbf":{"essential":true,"value":"\#(revokedAt)"}}}"#
        let refreshed = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", "refresh_token"), ("client_id", "broker-app"),
                ("refresh_token", try #require(signIn.string("refresh_token"))), ("claims", claims),
            ])
        let fresh = try #require(refreshed.string("access_token"))
        #expect(try await HTTP.get(me, headers: ["Authorization": "Bearer \(fresh)"]).status == 200)

        let last = try await HTTP.get(server.baseURL + "/test/last-claims?client_id=broker-app").json
        let access = (last["claims"] as? [String: Any])?["access_token"] as? [String: Any]
        #expect((access?["xms_cc"] as? [String: [String]])?["values"] == ["cp1"])
        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect(stats["claims"] as? Int == 2)
        let malformed = try await passwordGrant(server, extra: [("claims", "{not json")])
        #expect(malformed.status == 400)
        #expect(malformed.string("error") == "invalid_request")

        _ = try await Self.post(server, "/test/disable-account?username=alice@contoso.test")
        let disabled = try await HTTP.get(me, headers: ["Authorization": "Bearer \(plain)"])
        #expect(disabled.status == 401)
        #expect(disabled.header("WWW-Authenticate")?.contains(#"error="invalid_token""#) == true)
    }

    @Test func withoutCAENoTokenIsChallenged() async throws {
        let server = try await IdpSimServer.start(arguments: ["--without", "cae"])
        let token = try #require(
            try await passwordGrant(server, extra: [("claims", Self.capable)]).string("access_token"))
        #expect(jwtPayload(token)["xms_cc"] == nil)
        _ = try await Self.post(server, "/test/revoke-sessions?username=alice@contoso.test")
        let me = try await HTTP.get(server.baseURL + "/v1.0/me", headers: ["Authorization": "Bearer \(token)"])
        #expect(me.status == 200)
    }
}
