// Provider JSON: JSONValue.providerObject (where provider bytes become JSON, by the one strict
// reader), the readers on top of it (accessors, IdentityClaims.account for userinfo and ID-token
// claims, the native-authentication challenge reader) and the OAuth error body reader
// (OIDCProvider.oauthError) for every kind of status. What claims and error bodies give meets
// the outside-text rule: no control character but tab.
import BrokerCore
import HTTP
import JSON

@testable import Identity

func fuzzOne(_ bytes: [UInt8]) {
    if let value = try? JSONValue.providerObject(bytes, what: "the fuzz input") {
        guard case .object = value else { violated("JSONValue.providerObject returned something other than an object") }
        guard value == value else { violated("a parsed JSON value is not equal to itself") }
        walk(value, depth: 0)
        for tenant in ["", "contoso"] {
            if let account = try? IdentityClaims(claims: value).account(
                environment: "login.example", fallbackTenant: tenant)
            {
                if account.identifier.isEmpty || account.username.isEmpty {
                    violated("claims gave an account without identifier or username")
                }
                // The outside-text rule, where claims enter: nothing D-Bus or a terminal cannot take.
                for text in [account.username, account.identifier, account.tenantId, account.name]
                where (try? OutsideText.check(text)) == nil {
                    violated("claims gave an account with a control character: \(text.debugDescription)")
                }
            }
        }
        _ = OIDCProvider.unexpectedChallenge(value, wanted: .code).message
    }
    for status in [400, 401, 429, 500, 503] {
        let error = OIDCProvider.oauthError(HTTPResponse(status: status, body: bytes))
        _ = error.description
        if case .oauth(_, let code, let description, _, let suberror) = error {
            for text in [code, description, suberror ?? ""] where (try? OutsideText.check(text)) == nil {
                violated("an OAuth error body gave a text with a control character: \(text.debugDescription)")
            }
        }
        let kinds: [GrantKind] =
            SignInFlow.allCases.map(GrantKind.signIn) + [
                .refresh, .other, .deviceSecretExchange, .tokenExchange, .familyRefresh,
            ]
        for kind in kinds { _ = error.brokerFailure(during: kind).message }
    }
}

/// Reads every value the way the broker's readers do.
private func walk(_ value: JSONValue, depth: Int) {
    if depth > 10_000 { violated("JSON nesting deeper than the decoder should allow") }
    _ = value.string
    _ = value.number
    _ = value.int64
    for key in ["access_token", "expires_in", "error", "error_codes", "sub", "keys"] { _ = value[key] }
    switch value {
    case .array(let elements):
        for element in elements { walk(element, depth: depth + 1) }
    case .object(let members):
        for (_, member) in members { walk(member, depth: depth + 1) }
    default:
        break
    }
}
