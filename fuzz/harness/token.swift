// Token responses: OIDCProvider's grant path (OIDCProvider.swift `grant`, `tokens(from:...)`,
// `oauthError`) on whatever the token endpoint answers, through the provider's injectable
// transport (ProviderHTTP): discovery, JWKS and userinfo are fixed and well-formed, the token
// endpoint answers the fuzz input. This is what the broker reads after every sign-in and refresh:
// access_token, token_type, expires_in, scope, refresh_token, id_token (then checked against the
// JWKS) or, without one, userinfo.
//
// The first byte picks the status the token endpoint answers with (200 most of the time, else
// 400, 401, 429, 500, 503) and the grant: refresh, password sign-in (which first meets native
// authentication's 404), or one of single sign-on's: Native SSO's device-secret exchange, an
// RFC 8693 token exchange (whose answer carries `issued_token_type`), a family refresh token
// redeemed for another app; the rest is the body. When its top bit is set, the rest instead
// describes a well-formed answer (FuzzedData): which members it has, and values such as
// `expires_in` as a number or a string anywhere in Int64, which mutating JSON text rarely reaches.
import BrokerCore
import FoundationEssentials
import HTTP

@testable import Identity

private let base = "https://login.example/contoso"
private let authority = try! Authority(base + "/v2.0")
private let discovery = Array(
    """
    {"issuer": "\(base)/v2.0", "token_endpoint": "\(base)/oauth2/v2.0/token", "jwks_uri": "\(base)/discovery/v2.0/keys",
     "userinfo_endpoint": "\(base)/oidc/userinfo", "revocation_endpoint": "\(base)/oauth2/v2.0/revoke",
     "native_sso_supported": true, "grant_types_supported": ["refresh_token", "password", "\(ProviderMetadata.tokenExchangeGrant)"]}
    """.utf8)
private let jwks = Array(
    #"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#
        .utf8)
private let userinfo = Array(
    #"{"sub": "s-1", "oid": "oid-1", "tid": "contoso", "preferred_username": "alice@contoso.example", "name": "Alice"}"#
        .utf8)

/// What the token endpoint answers to the input under test (one input at a time).
private nonisolated(unsafe) var tokenAnswer = HTTPResponse(status: 200)

private let provider = OIDCProvider(
    authority: authority,
    requester: ProviderHTTP(
        transport: { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in
            switch request.url {
            case authority.discoveryURL: return HTTPResponse(status: 200, body: discovery)
            case base + "/discovery/v2.0/keys": return HTTPResponse(status: 200, body: jwks)
            case base + "/oidc/userinfo": return HTTPResponse(status: 200, body: userinfo)
            case base + "/oauth2/v2.0/token": return tokenAnswer
            default: return HTTPResponse(status: 404, body: Array(#"{"error":"not_found"}"#.utf8))
            }
        }, policy: .never, sleep: { _ in }),
    clock: FixedClock(), logger: quietLogger, allowPasswordGrant: true)

func fuzzOne(_ bytes: [UInt8]) {
    guard let mode = bytes.first else { return }
    let statuses = [200, 200, 200, 200, 200, 400, 401, 429, 500, 503]
    let body = mode & 0x80 == 0 ? Array(bytes.dropFirst()) : describedAnswer(FuzzedData(bytes.dropFirst()))
    // Bits 1-4 pick the status and bits 0, 5 and 6 the grant, so that every pair is reachable.
    tokenAnswer = HTTPResponse(status: statuses[Int((mode >> 1) & 0x0F) % statuses.count], body: body)
    let grant = (Int(mode & 1) | Int((mode >> 4) & 0b110)) % 5
    let scopes = Scopes(["User.Read"])
    let result = runBlocking { () -> Result<ProviderTokens, any Error> in
        do {
            switch grant {
            case 0:
                return .success(try await provider.refresh(clientId: "mail-app", refreshToken: "rt-0", scopes: scopes))
            case 1:
                return .success(
                    try await provider.signInWithPassword(
                        clientId: "mail-app", username: "alice@contoso.example",
                        password: "pw", scopes: scopes))
            case 2:
                return .success(
                    try await provider.exchangeDeviceSecret(
                        clientId: "calendar-app", deviceSecret: DeviceSecret(secret: "ds-0", idToken: "e30.e30.AAAA"),
                        scopes: scopes))
            case 3:
                return .success(
                    try await provider.exchangeToken(
                        clientId: "calendar-app", subject: .accessToken("at-0"), scopes: scopes))
            default:
                return .success(
                    try await provider.redeemFamilyRefreshToken(
                        clientId: "calendar-app", refreshToken: "rt-0", scopes: scopes))
            }
        } catch {
            return .failure(error)
        }
    }
    switch result {
    case .success(let tokens):
        if tokenAnswer.status != 200 { violated("a \(tokenAnswer.status) answer gave tokens") }
        if tokens.accessToken.isEmpty { violated("tokens without an access token") }
        if tokens.expiresOn < FixedClock().now() { violated("tokens that expired before they were issued") }
        if tokens.deviceSecret != nil && tokens.idToken == nil { violated("a device secret no ID token binds") }
        if tokens.family != nil && tokens.refreshToken == nil { violated("a family without a refresh token") }
    case .failure(let error):
        guard let failure = error as? BrokerFailure else {
            violated(
                "the provider threw \(type(of: error)), not a "
                    + "BrokerFailure")
        }
        // A single sign-on request the provider refused in any 4xx way is for a person to fix.
        if grant >= 2, [400, 401].contains(tokenAnswer.status), failure.code != .interactionRequired,
            failure.code != .serverError
        {
            violated("a refused single sign-on request gave \(failure.code)")
        }
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
    if data.bool() {
        members.append(#""scope": \#(quoted(data.string(["openid profile offline_access User.Read", ""])))"#)
    }
    if data.bool() { members.append(#""refresh_token": \#(quoted(data.string(["rt-1"])))"#) }
    if data.bool() { members.append(#""id_token": \#(quoted(data.string(["e30.e30.AAAA", "a.b"])))"#) }
    if data.bool() { members.append(#""device_secret": \#(quoted(data.string(["ds-1", ""])))"#) }
    switch data.byte() % 4 {
    case 0: members.append(#""foci": \#(quoted(data.string(["1", ""])))"#)
    case 1: members.append(#""foci": \#(data.int64())"#)
    default: break
    }
    if data.bool() {
        let issued = data.string([
            "urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:jwt", "N_A",
        ])
        members.append(#""issued_token_type": \#(quoted(issued))"#)
    }
    return Array(("{" + members.joined(separator: ", ") + "}").utf8)
}
