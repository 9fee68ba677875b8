import BrokerCore
import HTTP
import Testing

@testable import Identity

/// Where the provider's text enters the broker: claims and error texts meet the outside-text rule
/// (replaced), and a token it refuses stops the answer before anything of it is kept.
extension ProviderFaultPolicyTests {
    /// A refresh answered with `answer` at the token endpoint.
    private func refresh(answering answer: ScriptedTransport.Step) async throws -> Result<ProviderTokens, BrokerFailure>
    {
        let fake = FakeProvider(
            [
                "/.well-known": [.answer(200, body: discovery)], "/keys": [.answer(200, body: jwks([signer.jwk]))],
                "/oauth2/v2.0/token": [answer],
            ], time: time)
        let provider = try provider(fake)
        do {
            return .success(try await refresh(provider))
        } catch let failure as BrokerFailure {
            return .failure(failure)
        }
    }

    private func tokens(claims: [String: Any] = [:], fields: [String: Any] = [:]) -> String {
        let now = clock.now()
        var all: [String: Any] = [
            "iss": Self.authority, "aud": "mail-app", "sub": "s-1", "oid": "o-1", "tid": "t-1",
            "iat": now, "exp": now + 3600, "preferred_username": "ada@example.test",
        ]
        all.merge(claims) { $1 }
        var body: [String: Any] = [
            "access_token": "at-2", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt-2",
            "id_token": signer.token(all),
        ]
        body.merge(fields) { $1 }
        return json(body)
    }

    @Test func claimsWithControlCharactersAreReplacedWhereTheyEnter() async throws {
        let answer = tokens(claims: [
            "name": "Ada\u{0}\u{1B}[31m\u{7}\u{202E}ecaleoL", "preferred_username": "ada\u{85}@example.test",
            "oid": "o-\u{7F}1",
        ])
        let account = try await refresh(answering: .answer(200, body: answer)).get().account
        #expect(account.name == "Ada\u{FFFD}\u{FFFD}[31m\u{FFFD}\u{202E}ecaleoL")
        #expect(account.username == "ada\u{FFFD}@example.test")
        #expect(account.identifier == "o-\u{FFFD}1.t-1")
    }

    @Test func aTokenWithAControlCharacterRefusesTheWholeAnswer() async throws {
        for field in ["access_token", "refresh_token"] {
            let result = try await refresh(answering: .answer(200, body: tokens(fields: [field: "tok\nen"])))
            guard case .failure(let failure) = result else {
                Issue.record("\(field): a token with a line feed was kept")
                continue
            }
            #expect(failure.code == .serverError, "\(field)")
            #expect(failure.message.contains("\(field) holds U+000A, a control character"), "\(failure.message)")
        }
    }

    @Test func anErrorDescriptionKeepsItsFirstLineWithoutControlCharacters() async throws {
        let body = json([
            "error": "invalid_grant",
            "error_description": "AADSTS70000: the grant\u{0} is \u{1B}[2Jbad\r\nTrace ID: 42\r\nCorrelation ID: 7",
        ])
        let result = try await refresh(answering: .answer(400, body: body))
        guard case .failure(let failure) = result else {
            Issue.record("a refused refresh succeeded")
            return
        }
        #expect(failure.code == .interactionRequired)
        #expect(failure.message.contains("AADSTS70000: the grant\u{FFFD} is \u{FFFD}[2Jbad)"), "\(failure.message)")
        #expect(!failure.message.contains("Trace ID"), "only the first line, also when lines end with CRLF")
    }
}
