import BrokerCore
import Foundation
import HTTP
import Logging
import Testing

@testable import Identity

/// CIBA's login_hint as the administrator's `phoneApprovalLoginHint` forms it, on the wire, and
/// what the person is told when a provider refuses the shape it was sent in (glewlwyd answers a
/// plain username with a bare 400 invalid_request).
@Suite struct PhoneApprovalLoginHintTests {
    static let authority = Fixture.issuer
    let time = FakeTime()
    let clock = TestClock()

    var discovery: String {
        json([
            "issuer": Self.authority, "token_endpoint": Self.authority + "/token", "jwks_uri": Self.authority + "/keys",
            "backchannel_authentication_endpoint": Self.authority + "/ciba",
            "backchannel_token_delivery_modes_supported": ["poll"],
        ])
    }

    func provider(_ transport: ScriptedTransport, hint: PhoneApprovalLoginHint) throws -> OIDCProvider {
        OIDCProvider(
            authority: try Authority(Self.authority),
            requester: ProviderHTTP(
                transport: transport.transport, policy: .standard, clock: time, sleep: time.sleeper, random: { 1 }),
            clock: clock, logger: Logger(label: "test"), phoneApprovalLoginHint: hint)
    }

    /// The form fields of the backchannel authentication request `transport` saw.
    func sentFields(_ transport: ScriptedTransport) -> [String: String] {
        guard let request = transport.requests.first(where: { $0.url.hasSuffix("/ciba") }) else { return [:] }
        var fields: [String: String] = [:]
        for pair in String(decoding: request.body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            fields[parts[0].removingPercentEncoding ?? ""] = parts.count > 1 ? parts[1].removingPercentEncoding : ""
        }
        return fields
    }

    func start(_ provider: OIDCProvider, username: String) async -> Result<PhoneApprovalRequest, BrokerFailure> {
        do {
            return .success(
                try await provider.startPhoneApproval(
                    clientId: "mail-app", loginHint: username, bindingMessage: "KTW-482", scopes: Scopes(["openid"])))
        } catch let failure as BrokerFailure {
            return .failure(failure)
        } catch {
            return .failure(BrokerFailure(.serverError, "not a BrokerFailure: \(error)"))
        }
    }

    @Test func theTemplateShapesTheLoginHintAndAUsernameCannotBreakOutOfIt() async throws {
        let hint = try PhoneApprovalLoginHint(#"{"username":"{username}"}"#)
        let hostile = #"eve","sub":"alice"}\"#
        let transport = ScriptedTransport(
            [
                .answer(200, body: discovery),
                .answer(200, body: json(["auth_req_id": "r-1", "expires_in": 120, "interval": 5])),
            ], time: time)
        let request = try await start(provider(transport, hint: hint), username: hostile).get()
        #expect(request.authRequestId == "r-1")
        let sent = try #require(sentFields(transport)["login_hint"])
        #expect(sent == #"{"username":"eve\",\"sub\":\"alice\"}\\"}"#)
        let object = try JSONSerialization.jsonObject(with: Data(sent.utf8)) as? [String: String]
        #expect(object == ["username": hostile], "one key, the whole username its value")
        #expect(sentFields(transport)["binding_message"] == "KTW-482")
    }

    @Test func theDefaultSendsTheUsernameAsTyped() async throws {
        let transport = ScriptedTransport(
            [.answer(200, body: discovery), .answer(200, body: json(["auth_req_id": "r-1"]))], time: time)
        _ = try await start(provider(transport, hint: .plain), username: #"CORP\alice"#).get()
        #expect(sentFields(transport)["login_hint"] == #"CORP\alice"#)
    }

    @Test func aTemplateWithoutTheUsernameOrBrokenJSONIsRefused() {
        #expect(throws: PhoneApprovalLoginHint.Problem.self) { try PhoneApprovalLoginHint(#"{"username":"alice"}"#) }
        #expect(throws: PhoneApprovalLoginHint.Problem.self) {
            try PhoneApprovalLoginHint(#"{"username":"{username}""#)
        }
        #expect((try? PhoneApprovalLoginHint("{username}@example.test"))?.hint(for: "a") == "a@example.test")
    }

    /// glewlwyd's answer to a login_hint it cannot read, and to a user it does not know: 400
    /// invalid_request, nothing more. The message names the likely cause and the setting.
    @Test func aBareInvalidRequestNamesTheSettingWhileTheUsernameIsSentAsTyped() async throws {
        let refusal = ScriptedTransport.Step.answer(400, body: json(["error": "invalid_request"]))
        let plain = ScriptedTransport([.answer(200, body: discovery), refusal], time: time)
        guard case .failure(let failure) = await start(try provider(plain, hint: .plain), username: "alice") else {
            Issue.record("the refusal was taken")
            return
        }
        #expect(failure.code == .serverError)
        #expect(failure.message.contains("refused the request to ask alice's phone (the provider answered 400 "))
        #expect(failure.message.contains("phoneApprovalLoginHint"), "\(failure.message)")
        #expect(failure.message.contains(#"(glewlwyd: {"username":"NAME"})"#), "\(failure.message)")

        let shaped = ScriptedTransport([.answer(200, body: discovery), refusal], time: time)
        let hint = try PhoneApprovalLoginHint(#"{"username":"{username}"}"#)
        guard case .failure(let other) = await start(try provider(shaped, hint: hint), username: "nobody") else {
            Issue.record("the refusal was taken")
            return
        }
        #expect(other.code == .serverError)
        #expect(other.message.contains("it may know no such user"), "\(other.message)")
        #expect(other.message.contains(#"phoneApprovalLoginHint in broker.conf forms it ({"username":"{username}"})"#))
    }
}
