// Token responses: OIDCProvider's grant path (OIDCProvider.swift `grant`, `tokens(from:...)`,
// `oauthError`) on whatever the token endpoint answers, through the provider's injectable
// transport (ProviderHTTP): discovery, JWKS and userinfo are fixed and well-formed, the token
// endpoint answers the fuzz input. This is what the broker reads after every sign-in and refresh:
// access_token, token_type, expires_in, scope, refresh_token, id_token (then checked against the
// JWKS) or, without one, userinfo.
//
// The first byte picks the status the token endpoint answers with (200 most of the time, else
// 400, 401, 429, 500, 503) and the grant (refresh, or password sign-in, which first meets
// native authentication's 404); the rest is the body. When its top bit is set, the rest instead
// describes a well-formed answer (FuzzedData): which members it has, and values such as
// `expires_in` as a number or a string anywhere in Int64, which mutating JSON text rarely reaches.
import BrokerCore
import FoundationEssentials
import HTTP
@testable import Identity

private let base = "https://login.example/contoso"
private let authority = try! Authority(base + "/v2.0")
private let discovery = Array("""
    {"issuer": "\(base)/v2.0", "token_endpoint": "\(base)/oauth2/v2.0/token", "jwks_uri": "\(base)/discovery/v2.0/keys",
     "userinfo_endpoint": "\(base)/oidc/userinfo", "revocation_endpoint": "\(base)/oauth2/v2.0/revoke"}
    """.utf8)
private let jwks = Array(#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#.utf8)
private let userinfo = Array(#"{"sub": "s-1", "oid": "oid-1", "tid": "contoso", "preferred_username": "alice@contoso.example", "name": "Alice"}"#.utf8)

/// What the token endpoint answers to the input under test (one input at a time).
private nonisolated(unsafe) var tokenAnswer = HTTPResponse(status: 200)

private let provider = OIDCProvider(
    authority: authority,
    requester: ProviderHTTP(transport: { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in
        switch request.url {
        case authority.discoveryURL: return HTTPResponse(status: 200, body: discovery)
        case base + "/discovery/v2.0/keys": return HTTPResponse(status: 200, body: jwks)
        case base + "/oidc/userinfo": return HTTPResponse(status: 200, body: userinfo)
        case base + "/oauth2/v2.0/token": return tokenAnswer
        default: return HTTPResponse(status: 404, body: Array(#"{"error":"not_found"}"#.utf8))
        }
    }, policy: .never, sleep: { _ in }),
    clock: FixedClock(), logger: quietLogger)

func fuzzOne(_ bytes: [UInt8]) {
    guard let mode = bytes.first else { return }
    let statuses = [200, 200, 200, 200, 200, 400, 401, 429, 500, 503]
    let body = mode & 0x80 == 0 ? Array(bytes.dropFirst()) : describedAnswer(FuzzedData(bytes.dropFirst()))
    tokenAnswer = HTTPResponse(status: statuses[Int(mode >> 1) % statuses.count], body: body)
    let scopes = Scopes(["User.Read"])
    let result = runBlocking { () -> Result<ProviderTokens, any Error> in
        do {
            if mode & 1 == 0 {
                return .success(try await provider.refresh(clientId: "mail-app", refreshToken: "rt-0", scopes: scopes))
            }
            return .success(try await provider.signInWithPassword(clientId: "mail-app", username: "alice@contoso.example",
                                                                  password: "pw", scopes: scopes))
        } catch {
            return .failure(error)
        }
    }
    switch result {
    case .success(let tokens):
        if tokenAnswer.status != 200 { violated("a \(tokenAnswer.status) answer gave tokens") }
        if tokens.accessToken.isEmpty { violated("tokens without an access token") }
        if tokens.expiresOn < FixedClock().now() { violated("tokens that expired before they were issued") }
    case .failure(let error):
        guard error is BrokerFailure else { violated("the provider threw \(type(of: error)), not a BrokerFailure") }
    }
}

/// A token response whose members and values the input picks.
private func describedAnswer(_ source: FuzzedData) -> [UInt8] {
    var data = source
    func quoted(_ text: String) -> String {
        (try? JSONEncoder().encode(text)).map { String(decoding: $0, as: UTF8.self) } ?? "\"\""
    }
    var members: [String] = []
    if data.byte() < 240 { members.append(#""access_token": \#(quoted(data.string(["at-1", ""])))"#) }
    members.append(#""token_type": \#(quoted(data.string(["Bearer", "bearer", "MAC"])))"#)
    let seconds = data.int64()
    switch data.byte() % 5 {
    case 0: members.append(#""expires_in": \#(seconds)"#)
    case 1: members.append(#""expires_in": "\#(seconds)""#)
    case 2: members.append(#""expires_in": \#(Double(seconds) * 1024)"#)
    case 3: members.append(#""expires_in": \#(quoted(data.string(["3600", " 3600", "+3600", "3600.5", "0x10"])))"#)
    default: break
    }
    if data.bool() { members.append(#""scope": \#(quoted(data.string(["openid profile offline_access User.Read", ""])))"#) }
    if data.bool() { members.append(#""refresh_token": \#(quoted(data.string(["rt-1"])))"#) }
    if data.bool() { members.append(#""id_token": \#(quoted(data.string(["e30.e30.AAAA", "a.b"])))"#) }
    return Array(("{" + members.joined(separator: ", ") + "}").utf8)
}
