import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// idp-sim's OpenID Connect CIBA (poll mode) over real HTTP: the backchannel authentication
/// endpoint's checks, the token endpoint's answers to each state, and the simulated phone.
@Suite("idp-sim CIBA")
struct CibaTests {
    static let grantType = "urn:openid:params:grant-type:ciba"
    static let alice = "alice@contoso.test"

    static func bcAuthorize(
        _ server: IdpSimServer, _ parameters: [(String, String)], clientId: String = "broker-app"
    ) async throws -> HTTPResult {
        try await HTTP.postForm(
            server.authority + "/oauth2/v2.0/bc-authorize", [("client_id", clientId)] + parameters)
    }

    /// A request for alice by `login_hint`; its `auth_req_id`.
    static func start(
        _ server: IdpSimServer, scope: String = "openid profile offline_access User.Read",
        bindingMessage: String = "Kiosk 7 at the front desk"
    ) async throws -> String {
        let answer = try await bcAuthorize(
            server, [("scope", scope), ("login_hint", alice), ("binding_message", bindingMessage)])
        #expect(answer.status == 200, "\(answer.text)")
        return try #require(answer.string("auth_req_id"))
    }

    static func poll(_ server: IdpSimServer, _ authReqId: String, clientId: String = "broker-app") async throws
        -> HTTPResult
    {
        try await HTTP.postForm(
            server.tokenURL, [("grant_type", grantType), ("client_id", clientId), ("auth_req_id", authReqId)])
    }

    static func phoneRequests(_ server: IdpSimServer, username: String = alice) async throws -> HTTPResult {
        try await HTTP.get(
            server.baseURL + "/phone/requests?username=" + String(HTTP.formEncode([("", username)]).dropFirst()))
    }

    /// The phone-side ids of alice's waiting requests, oldest first.
    static func phoneIds(_ server: IdpSimServer) async throws -> [String] {
        let list = try await phoneRequests(server)
        let requests = try #require(list.json["requests"] as? [[String: Any]])
        return requests.compactMap { $0["id"] as? String }
    }

    static func answer(_ server: IdpSimServer, id: String, action: String) async throws -> HTTPResult {
        try await HTTP.postForm(server.baseURL + "/phone/requests/" + id, [("action", action)])
    }

    static func seconds(_ value: Double) async throws {
        try await Task.sleep(for: .milliseconds(Int(value * 1000)))
    }

    @Test func discoveryAdvertisesCibaAndWithoutItNothingAnswers() async throws {
        let server = try await IdpSimServer.start()
        let document = try await HTTP.get(server.authority + "/.well-known/openid-configuration").json
        #expect(
            document["backchannel_authentication_endpoint"] as? String
                == server.authority + "/oauth2/v2.0/bc-authorize")
        #expect(document["backchannel_token_delivery_modes_supported"] as? [String] == ["poll"])
        #expect(document["backchannel_user_code_parameter_supported"] as? Bool == false)
        #expect((document["grant_types_supported"] as? [String])?.contains(Self.grantType) == true)

        let plain = try await IdpSimServer.start(arguments: ["--without", "ciba"])
        let without = try await HTTP.get(plain.authority + "/.well-known/openid-configuration").json
        for key in [
            "backchannel_authentication_endpoint", "backchannel_token_delivery_modes_supported",
            "backchannel_user_code_parameter_supported",
        ] {
            #expect(without[key] == nil, "\(key)")
        }
        #expect((without["grant_types_supported"] as? [String])?.contains(Self.grantType) == false)
        let refused = try await Self.bcAuthorize(plain, [("scope", "openid"), ("login_hint", Self.alice)])
        #expect(refused.status == 404)
        #expect(try await Self.poll(plain, "anything").string("error") == "unsupported_grant_type")
        #expect(try await Self.phoneRequests(plain).status == 404)
        #expect(try await HTTP.get(plain.baseURL + "/phone?username=alice@contoso.test").status == 404)
    }

    @Test func badRequestsAreRefusedEachWithItsError() async throws {
        let server = try await IdpSimServer.start()
        func refusal(_ parameters: [(String, String)], clientId: String = "broker-app") async throws -> (Int, String) {
            let answer = try await Self.bcAuthorize(server, parameters, clientId: clientId)
            return (answer.status, answer.string("error") ?? answer.text)
        }
        let openid = ("scope", "openid profile")
        let hint = ("login_hint", Self.alice)
        #expect(try await refusal([("scope", "profile User.Read"), hint]) == (400, "invalid_scope"))
        #expect(try await refusal([hint]) == (400, "invalid_scope"))
        #expect(try await refusal([openid]) == (400, "invalid_request"))
        #expect(try await refusal([openid, hint, ("login_hint_token", "x.y.z")]) == (400, "invalid_request"))
        let hintToken = try await Self.bcAuthorize(server, [openid, ("login_hint_token", "x.y.z")])
        #expect(hintToken.string("error") == "invalid_request")
        #expect(hintToken.string("error_description")?.contains("login_hint_token is not supported") == true)
        #expect(try await refusal([openid, ("login_hint", "nobody@contoso.test")]) == (400, "unknown_user_id"))
        #expect(try await refusal([openid, ("id_token_hint", "not-a-jwt")]) == (400, "invalid_request"))
        #expect(
            try await refusal([openid, hint, ("binding_message", String(repeating: "x", count: 65))])
                == (400, "invalid_binding_message"))
        #expect(
            try await refusal([openid, hint, ("binding_message", "line one\nline two")])
                == (400, "invalid_binding_message"))
        // One character on screen, but 65 code points of stacked accents.
        #expect(
            try await refusal([openid, hint, ("binding_message", "e" + String(repeating: "\u{301}", count: 64))])
                == (400, "invalid_binding_message"))
        // A right-to-left override would show the person "Approve 42" reversed.
        #expect(
            try await refusal([openid, hint, ("binding_message", "Kiosk \u{202E}24 evorppA")])
                == (400, "invalid_binding_message"))
        #expect(try await refusal([openid, hint, ("requested_expiry", "0")]) == (400, "invalid_request"))
        #expect(try await refusal([openid, hint, ("requested_expiry", "soon")]) == (400, "invalid_request"))
        // Client authentication as at the token endpoint.
        #expect(try await refusal([openid, hint], clientId: "conf-app") == (401, "invalid_client"))
        #expect(try await refusal([openid, hint, ("client_secret", "x")]) == (401, "invalid_client"))
        #expect(try await refusal([openid, hint], clientId: "no-such-app") == (401, "invalid_client"))
        // None of them left a request on alice's phone.
        #expect(try await Self.phoneIds(server).isEmpty)

        // The longest binding message passes; requested_expiry caps the lifetime, never extends it.
        let ok = try await Self.bcAuthorize(
            server, [openid, hint, ("binding_message", String(repeating: "é", count: 64)), ("requested_expiry", "30")])
        #expect(ok.status == 200)
        #expect(ok.header("Cache-Control")?.contains("no-store") == true)
        #expect(ok.json["expires_in"] as? Int == 30)
        #expect(ok.json["interval"] as? Int == 5)
        let id = try #require(ok.string("auth_req_id"))
        #expect(id.count >= 22 && id.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
        let capped = try await Self.bcAuthorize(server, [openid, hint, ("requested_expiry", "100000")])
        #expect(capped.json["expires_in"] as? Int == 120)
        let confidential = try await Self.bcAuthorize(
            server, [openid, hint, ("client_secret", "s3cret")], clientId: "conf-app")
        #expect(confidential.status == 200, "\(confidential.text)")
        #expect(try await Self.phoneIds(server).count == 3)
    }

    @Test func idTokenHintNamesTheUserOnlyWhenThisProviderIssuedItToThisClient() async throws {
        let server = try await IdpSimServer.start()
        let signIn = try await passwordGrant(server, username: "carol@contoso.test", password: "Carol#1")
        let idToken = try #require(signIn.string("id_token"))
        let answer = try await Self.bcAuthorize(server, [("scope", "openid"), ("id_token_hint", idToken)])
        #expect(answer.status == 200, "\(answer.text)")
        let carols = try #require(
            try await Self.phoneRequests(server, username: "carol@contoso.test").json["requests"] as? [Any])
        #expect(carols.count == 1)

        // The same token with alice's oid in it: the signature no longer matches.
        let parts = idToken.split(separator: ".").map(String.init)
        var claims = jwtPayload(idToken)
        let aliceToken = try #require(try await passwordGrant(server).string("id_token"))
        claims["oid"] = jwtPayload(aliceToken)["oid"]
        let forgedPayload = try JSONSerialization.data(withJSONObject: claims).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let forged = [parts[0], forgedPayload, parts[2]].joined(separator: ".")
        let refused = try await Self.bcAuthorize(server, [("scope", "openid"), ("id_token_hint", forged)])
        #expect(refused.status == 400 && refused.string("error") == "invalid_request")
        // Carol's genuine ID token, presented by another client.
        let other = try await Self.bcAuthorize(
            server, [("scope", "openid"), ("id_token_hint", idToken), ("client_secret", "s3cret")],
            clientId: "conf-app")
        #expect(other.status == 400 && other.string("error") == "invalid_request")
        #expect(try await Self.phoneIds(server).isEmpty)
    }

    @Test func approvedOnThePhoneGivesTokensOnceWithAuthTimeOfTheApproval() async throws {
        let server = try await IdpSimServer.start(arguments: ["--ciba-interval", "1"])
        let authReqId = try await Self.start(server)
        let pending = try await Self.poll(server, authReqId)
        #expect(pending.status == 400 && pending.string("error") == "authorization_pending")

        let list = try await Self.phoneRequests(server)
        #expect(list.status == 200)
        #expect(!list.text.contains(authReqId))
        let requests = try #require(list.json["requests"] as? [[String: Any]])
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        let id = try #require(request["id"] as? String)
        #expect(id != authReqId)
        #expect(request["binding_message"] as? String == "Kiosk 7 at the front desk")
        #expect(request["client_id"] as? String == "broker-app")
        #expect(request["scope"] as? String == "openid profile offline_access User.Read")
        #expect((request["expires_in"] as? Int).map { $0 > 100 && $0 <= 120 } == true)

        try await Self.seconds(1.2)
        let before = Date().timeIntervalSince1970.rounded(.down)
        let approved = try await Self.answer(server, id: id, action: "approve")
        let after = Date().timeIntervalSince1970.rounded(.up)
        #expect(approved.status == 200)
        #expect(approved.string("status") == "approved" && approved.string("id") == id)
        #expect(try await Self.phoneIds(server).isEmpty)
        #expect(try await Self.answer(server, id: id, action: "deny").status == 404)

        // Polled two seconds after the approval: auth_time is the approval's, not the poll's.
        try await Self.seconds(2.1)
        let tokens = try await Self.poll(server, authReqId)
        #expect(tokens.status == 200, "\(tokens.text)")
        #expect(tokens.header("Cache-Control")?.contains("no-store") == true)
        #expect(tokens.string("access_token") != nil && tokens.string("refresh_token") != nil)
        let idToken = jwtPayload(try #require(tokens.string("id_token")))
        let authTime = Double(try #require(idToken["auth_time"] as? Int))
        #expect(authTime >= before && authTime <= after, "auth_time \(authTime) not in \(before)...\(after)")
        let reference = jwtPayload(try #require(try await passwordGrant(server).string("id_token")))
        #expect(idToken["sub"] as? String == reference["sub"] as? String)
        #expect(idToken["preferred_username"] as? String == Self.alice)
        #expect(idToken["aud"] as? String == "broker-app")

        let again = try await Self.poll(server, authReqId)
        #expect(again.status == 400 && again.string("error") == "invalid_grant")

        let stats = try await HTTP.get(server.baseURL + "/test/stats").json
        #expect(stats["bc-authorize"] as? Int == 1)
        #expect(stats["ciba-poll"] as? Int == 3)
    }

    @Test func deniedOnThePhoneIsAccessDenied() async throws {
        let server = try await IdpSimServer.start(arguments: ["--ciba-interval", "1"])
        let authReqId = try await Self.start(server)
        let id = try #require(try await Self.phoneIds(server).first)
        #expect(try await Self.answer(server, id: id, action: "maybe").status == 400)
        #expect(try await Self.answer(server, id: "no-such-request", action: "approve").status == 404)
        let denied = try await Self.answer(server, id: id, action: "deny")
        #expect(denied.status == 200 && denied.string("status") == "denied")
        #expect(try await Self.answer(server, id: id, action: "approve").status == 404)
        let answer = try await Self.poll(server, authReqId)
        #expect(answer.status == 400 && answer.string("error") == "access_denied")
        #expect(try await Self.phoneRequests(server, username: "nobody@contoso.test").status == 404)
    }

    @Test func anUnansweredRequestExpires() async throws {
        // Long enough that a loaded machine still lists the request before it expires.
        let server = try await IdpSimServer.start(arguments: ["--ciba-lifetime", "4", "--ciba-interval", "1"])
        let started = ContinuousClock.now
        let authReqId = try await Self.start(server)
        let id = try #require(try await Self.phoneIds(server).first)
        // No event marks an expiry: the listing is read until it is empty, bounded.
        while try await !Self.phoneIds(server).isEmpty {
            try #require(ContinuousClock.now - started < .seconds(15), "the request never expired")
            try await Self.seconds(0.2)
        }
        #expect(ContinuousClock.now - started >= .seconds(4), "not before its lifetime")
        #expect(try await Self.answer(server, id: id, action: "approve").status == 404)
        let answer = try await Self.poll(server, authReqId)
        #expect(answer.status == 400 && answer.string("error") == "expired_token")
    }

    @Test func anotherClientsOrAnUnknownAuthReqIdIsInvalidGrant() async throws {
        let server = try await IdpSimServer.start()
        let authReqId = try await Self.start(server)
        let id = try #require(try await Self.phoneIds(server).first)
        #expect(try await Self.answer(server, id: id, action: "approve").status == 200)
        let stolen = try await HTTP.postForm(
            server.tokenURL,
            [
                ("grant_type", Self.grantType), ("client_id", "conf-app"), ("client_secret", "s3cret"),
                ("auth_req_id", authReqId),
            ])
        #expect(stolen.status == 400 && stolen.string("error") == "invalid_grant")
        let unknown = try await Self.poll(server, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        #expect(unknown.status == 400 && unknown.string("error") == "invalid_grant")
        let missing = try await HTTP.postForm(
            server.tokenURL, [("grant_type", Self.grantType), ("client_id", "broker-app")])
        #expect(missing.status == 400 && missing.string("error") == "invalid_request")
        // The rightful client still gets its tokens: the theft did not spend them.
        #expect(try await Self.poll(server, authReqId).status == 200)
    }

    @Test func slowDownIsAnsweredAsToldAndTheIntervalGrows() async throws {
        let server = try await IdpSimServer.start(arguments: ["--ciba-interval", "1", "--ciba-slow-down", "1"])
        let authReqId = try await Self.start(server)
        #expect(try await Self.poll(server, authReqId).string("error") == "slow_down")
        // 1.5 s after it would be on time at the first interval, but the interval is now 6 s.
        try await Self.seconds(1.5)
        #expect(try await Self.poll(server, authReqId).string("error") == "slow_down")

        // Five seconds: two polls in a row fall within it however loaded the machine is.
        let paced = try await IdpSimServer.start(arguments: ["--ciba-interval", "5"])
        let other = try await Self.start(paced)
        #expect(try await Self.poll(paced, other).string("error") == "authorization_pending")
        #expect(try await Self.poll(paced, other).string("error") == "slow_down")
    }

    @Test func thePhonePageEscapesAndItsFormApproves() async throws {
        let server = try await IdpSimServer.start()
        let authReqId = try await Self.start(
            server, scope: "openid offline_access device_sso", bindingMessage: "<script>alert(1)</script>")
        let page = try await HTTP.get(server.baseURL + "/phone?username=alice%40contoso.test")
        #expect(page.status == 200)
        #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
        #expect(page.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(!page.text.contains("<script>"))
        #expect(!page.text.contains(authReqId))
        #expect(page.text.contains("broker-app"))
        let id = try #require(try await Self.phoneIds(server).first)
        #expect(page.text.contains(id))

        let posted = try await HTTP.postForm(
            server.baseURL + "/phone", [("id", id), ("action", "approve"), ("username", Self.alice)])
        #expect(posted.status == 303)
        #expect(posted.header("Location") == "/phone?username=alice%40contoso.test")
        let tokens = try await Self.poll(server, authReqId)
        #expect(tokens.status == 200, "\(tokens.text)")
        // Native SSO, as for the device code: device_sso asked, a device secret handed out.
        #expect(tokens.string("device_secret") != nil)
        let again = try await HTTP.postForm(
            server.baseURL + "/phone", [("id", id), ("action", "approve"), ("username", Self.alice)])
        #expect(again.status == 404 && again.text.contains("already answered"))
        let unknownAction = try await HTTP.postForm(
            server.baseURL + "/phone", [("id", id), ("action", "shrug"), ("username", Self.alice)])
        #expect(unknownAction.status == 400)
    }

    @Test func aDisabledAccountAFullPhoneAndAFaultAreRefused() async throws {
        let server = try await IdpSimServer.start()
        for _ in 0..<20 { _ = try await Self.start(server) }
        let full = try await Self.bcAuthorize(server, [("scope", "openid"), ("login_hint", Self.alice)])
        #expect(full.status == 403 && full.string("error") == "access_denied")

        let carol = [("scope", "openid"), ("login_hint", "carol@contoso.test")]
        _ = try await HTTP.postForm(server.baseURL + "/test/disable-account?username=carol@contoso.test", [])
        let disabled = try await Self.bcAuthorize(server, carol)
        #expect(disabled.status == 403 && disabled.string("error") == "access_denied")
        _ = try await HTTP.postForm(server.baseURL + "/test/enable-account?username=carol@contoso.test", [])

        let fault = #"{"mode": "unavailable", "endpoint": "bc-authorize", "count": 1}"#
        #expect(try await HTTP.postJSON(server.baseURL + "/test/faults", fault).status == 200)
        #expect(try await Self.bcAuthorize(server, carol).status == 503)
        #expect(try await Self.bcAuthorize(server, carol).status == 200)
    }
}
