import BrokerAPI
import BrokerCore
import Foundation
import Testing

@testable import BrokerDaemon

/// Microsoft's broker protocol, translated without a bus: requests as its clients write them
/// (unknown keys ignored, types checked, limits), and replies in the shapes they require.
@Suite("Microsoft broker protocol: reading requests and writing replies")
struct MicrosoftBrokerTranslationTests {
    static let account = Account(
        username: "alice@contoso.example",
        identifier: "6003749b-b928-5204-81a5-6be267353f55.4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20",
        tenantId: "4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20", environment: "login.contoso.example", name: "Alice Example")

    static func object(_ json: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test("a silent request as Microsoft's library sends it: authParameters read, unknown keys ignored")
    func silentRequest() throws {
        let request = try MicrosoftBrokerRequest(
            """
            {"authParameters": {"account": {"homeAccountId": "oid.tid", "username": "alice@contoso.example",
              "alternativeAccountId": "", "middleName": ""}, "authority": "https://login.microsoftonline.com/common",
              "authorizationType": 1, "clientId": "mail-app", "redirectUri": "mail-app",
              "requestedScopes": ["User.Read"], "username": "alice@contoso.example", "uxContextHandle": -1,
              "additionalQueryParametersForAuthorization": {}, "decodedClaims": "", "isTestMode": false}}
            """, for: .acquireTokenSilently)
        #expect(request.clientId == "mail-app")
        #expect(request.scopes == ["User.Read"])
        #expect(request.account == .init(homeAccountId: "oid.tid", username: "alice@contoso.example"))
        #expect(request.authorityTenant == "common")
    }

    @Test("account at the top level, null accounts and a silent sign-in without an account")
    func accountPlacements() throws {
        let topLevel = try MicrosoftBrokerRequest(
            #"{"account": {"homeAccountId": "a.b"}, "authParameters": {"clientId": "c", "requestedScopes": []}}"#,
            for: .acquireTokenSilently)
        #expect(topLevel.account?.homeAccountId == "a.b")
        let signIn = try MicrosoftBrokerRequest(
            #"{"authParameters": {"clientId": "c", "requestedScopes": ["s"], "account": null, "username": "", "isSignIn": true}}"#,
            for: .acquireTokenSilently)
        #expect(signIn.account == nil)
        // Some clients send the parameters of an interactive request at the top level.
        let flat = try MicrosoftBrokerRequest(
            #"{"clientId": "c", "redirectUri": "urn:ietf:oob", "authority": "https://login.microsoftonline.com/t", "requestedScopes": ["s"]}"#,
            for: .acquireTokenInteractively)
        #expect(flat.clientId == "c" && flat.authorityTenant == "t")
    }

    @Test(
        "malformed, mistyped, incomplete and oversized requests are status 6",
        arguments: [
            "not json", "[]", "\"text\"", "{", #"{"authParameters": "x"}"#,
            #"{"authParameters": {"clientId": 7, "requestedScopes": ["s"]}}"#,
            #"{"authParameters": {"clientId": "c", "requestedScopes": "User.Read"}}"#,
            #"{"authParameters": {"clientId": "c", "requestedScopes": [1]}}"#,
            #"{"authParameters": {"requestedScopes": ["s"]}}"#,
            #"{"authParameters": {"clientId": "c"}}"#,
            #"{"authParameters": {"clientId": "c", "requestedScopes": ["s"], "account": "alice"}}"#,
            "{\"clientId\": \"c\", \"pad\": \"" + String(repeating: "x", count: 70_000) + "\"}",
        ])
    func malformed(_ json: String) {
        #expect(throws: MicrosoftBrokerFailure.self) {
            _ = try MicrosoftBrokerRequest(json, for: .acquireTokenSilently)
        }
        do {
            _ = try MicrosoftBrokerRequest(json, for: .acquireTokenSilently)
        } catch {
            #expect(error.status == .apiContractViolation, "\(error)")
        }
    }

    @Test(
        "JSON two readers could read differently is status 6: a key twice, a byte order mark, a trailing comma",
        arguments: [
            // The caller policy would check one clientId, and another reader of the text could act for the other.
            (
                #"{"authParameters": {"clientId": "mail-app", "clientId": "kiosk-app", "requestedScopes": ["s"]}}"#,
                #"has the key "clientId" twice in authParameters"#
            ),
            (
                #"{"authParameters": {"clientId": "mail-app", "client\u0049d": "kiosk-app", "requestedScopes": ["s"]}}"#,
                #"has the key "clientId" twice in authParameters"#
            ),
            (
                #"{"authParameters": {"clientId": "c", "requestedScopes": ["s"]}, "authParameters": {}}"#,
                #"has the key "authParameters" twice at the top level"#
            ),
            ("\u{FEFF}" + #"{"authParameters": {"clientId": "c", "requestedScopes": ["s"]}}"#, "byte order mark"),
            (#"{"authParameters": {"clientId": "c", "requestedScopes": ["s"],}}"#, "trailing commas are not JSON"),
            (#"{"authParameters": {"clientId": "c", "requestedScopes": ["s",]}}"#, "trailing commas are not JSON"),
            (#"{"authParameters": {"clientId": "c", "requestedScopes": ["s"]}} /* */"#, "comments are not JSON"),
        ])
    func strictJSON(_ json: String, _ why: String) {
        do {
            _ = try MicrosoftBrokerRequest(json, for: .acquireTokenSilently)
            Issue.record("accepted: \(json)")
        } catch {
            #expect(error.status == .apiContractViolation, "\(error)")
            #expect(error.context.contains(why), "\(error.context)")
        }
    }

    @Test("getAccounts needs a clientId, not a redirectUri; the version call needs nothing")
    func lenientWhereClientsDiffer() throws {
        #expect(try MicrosoftBrokerRequest(#"{"clientId": "c"}"#, for: .getAccounts).clientId == "c")
        #expect(
            try MicrosoftBrokerRequest(#"{"msalCppVersion": "1.2.3"}"#, for: .getLinuxBrokerVersion).clientId == nil)
        #expect(throws: MicrosoftBrokerFailure.self) { try MicrosoftBrokerRequest("{}", for: .getAccounts) }
    }

    @Test("the account object has every key of the protocol, clientInfo is base64url of uid and utid")
    func accountObject() throws {
        let reply = try Self.object(MicrosoftBrokerResponse.accounts([Self.account]))
        let accounts = try #require(reply["accounts"] as? [[String: Any]])
        let account = try #require(accounts.first)
        #expect(account["homeAccountId"] as? String == Self.account.identifier)
        #expect(account["localAccountId"] as? String == "6003749b-b928-5204-81a5-6be267353f55")
        #expect(account["realm"] as? String == Self.account.tenantId)
        #expect(account["environment"] as? String == "login.contoso.example")
        #expect(account["username"] as? String == Self.account.username)
        #expect(account["name"] as? String == "Alice Example")
        #expect(account["givenName"] as? String == "" && account["familyName"] as? String == "")
        #expect(account["passwordExpiry"] as? Int == 0)
        let info = try #require(account["clientInfo"] as? String)
        #expect(!info.contains("=") && !info.contains("+") && !info.contains("/"))
        let padded =
            info.replacing("-", with: "+").replacing("_", with: "/")
            + String(repeating: "=", count: (4 - info.count % 4) % 4)
        let decoded = try Self.object(String(decoding: try #require(Data(base64Encoded: padded)), as: UTF8.self))
        #expect(
            decoded as? [String: String] == [
                "uid": "6003749b-b928-5204-81a5-6be267353f55", "utid": Self.account.tenantId,
            ])
    }

    @Test("a token reply: milliseconds, one space-separated scope string, type 0, the raw ID token")
    func tokenReply() throws {
        let tokens = AppTokens(
            accessToken: "opaque-access", expiresOn: 1_800_000_000, idToken: "h.p.s",
            scopes: Scopes(["User.Read", "Mail.Read"]),
            account: Self.account, authority: "https://login.contoso.example/t/v2.0", correlationId: "x")
        let reply = try #require(
            try Self.object(MicrosoftBrokerResponse.token(tokens, clientId: "mail-app"))["brokerTokenResponse"]
                as? [String: Any])
        #expect(reply["accessToken"] as? String == "opaque-access")
        #expect(reply["accessTokenType"] as? Int == 0)
        #expect(reply["expiresOn"] as? Int64 == 1_800_000_000_000)
        #expect(reply["extendedExpiresOn"] as? Int64 == 1_800_000_000_000)
        #expect(reply["idToken"] as? String == "h.p.s")
        #expect(reply["grantedScopes"] as? String == Scopes(["User.Read", "Mail.Read"]).joined)
        #expect(reply["clientInfo"] as? String != nil)
        #expect((reply["account"] as? [String: Any])?["homeAccountId"] as? String == Self.account.identifier)
    }

    @Test("without the provider's ID token, an unsigned one with the account's claims")
    func unsignedIDToken() throws {
        let tokens = AppTokens(
            accessToken: "a", expiresOn: 1_800_000_000, idToken: nil, scopes: Scopes(["s"]), account: Self.account,
            authority: "https://login.contoso.example/t/v2.0", correlationId: "x")
        let parts = MicrosoftBrokerResponse.unsignedIDToken(tokens, clientId: "mail-app").split(
            separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3 && parts[2].isEmpty)
        let payload = String(parts[1]).replacing("-", with: "+").replacing("_", with: "/")
        let claims = try Self.object(
            String(
                decoding: try #require(
                    Data(base64Encoded: payload + String(repeating: "=", count: (4 - payload.count % 4) % 4))),
                as: UTF8.self))
        #expect(claims["preferred_username"] as? String == Self.account.username)
        #expect(claims["tid"] as? String == Self.account.tenantId && claims["aud"] as? String == "mail-app")
    }

    @Test("errors carry all five keys; token methods nest them in brokerTokenResponse")
    func errorShapes() throws {
        let failure = MicrosoftBrokerFailure(BrokerFailure(.interactionRequired, "sign in"))
        let token = try Self.object(
            MicrosoftBrokerResponse.error(failure, correlationId: "c-1", for: .acquireTokenSilently))
        let nested = try #require((token["brokerTokenResponse"] as? [String: Any])?["error"] as? [String: Any])
        #expect(Set(nested.keys) == ["context", "errorCode", "status", "subStatus", "tag"])
        #expect(nested["status"] as? Int == 2)
        #expect((nested["context"] as? String)?.contains("c-1") == true)
        let other = try Self.object(MicrosoftBrokerResponse.error(failure, correlationId: "", for: .getAccounts))
        #expect((other["error"] as? [String: Any])?["status"] as? Int == 2)
    }

    @Test(
        "the broker's errors map to the protocol's statuses",
        arguments: [
            (BrokerErrorCode.interactionRequired, false, 2), (.noAccount, false, 2), (.noAccount, true, 16),
            (.accountAlreadySignedIn, false, 12), (.serverUnavailable, false, 5), (.invalidArgument, false, 6),
            (.cancelled, false, 7), (.unknownClient, false, 9), (.storageLocked, false, 17),
            (.serverError, false, 0),
        ])
    func statuses(_ code: BrokerErrorCode, _ namedAccount: Bool, _ status: Int) {
        #expect(MicrosoftBrokerFailure(BrokerFailure(code, "m"), namedAccount: namedAccount).status.rawValue == status)
    }
}
