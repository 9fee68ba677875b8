// Shared Signals: what a transmitter answers brokerd's receiver (SharedSignalsReceiver.swift) and
// the security event tokens it delivers (SecurityEventToken.swift), through the provider's
// injectable transport: discovery, the client-credentials token and the JWKS are fixed and
// well-formed; the first byte picks what the fuzz input is:
//   bit 0 clear: the claims of a SET (JSON), read by SecurityEventVerifier.read (the checks after
//                the signature), with the subject identifiers of RFC 9493;
//   bit 0 set, bit 1 clear: the stream configuration endpoint's answer (GET: an array or an
//                object), then a poll of whatever stream it describes;
//   bits 0 and 1 set: the poll's answer on a well-formed stream (`sets`, `moreAvailable`).
// Invariants: the reader throws only its own errors; an accepted event has a jti of at most 256
// bytes and without control characters, a session end names a subject, and its time is never
// after its iat; a poll gives at most 50 events, each keyed by its own jti when it verified; the
// texts of subjects hold no control character but tab.
import BrokerCore
import FoundationEssentials
import HTTP
import JSON

@testable import Identity

private let base = "https://login.example/contoso"
private let authority = try! Authority(base + "/v2.0")
private let discovery = Array(
    """
    {"issuer": "\(base)/v2.0", "token_endpoint": "\(base)/oauth2/v2.0/token", "jwks_uri": "\(base)/keys"}
    """.utf8)
private let ssfMetadata = Array(
    """
    {"issuer": "\(base)/v2.0", "jwks_uri": "\(base)/keys", "delivery_methods_supported": ["urn:ietf:rfc:8936"],
     "configuration_endpoint": "\(base)/ssf/streams", "status_endpoint": "\(base)/ssf/status"}
    """.utf8)
private let jwks = Array(
    #"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#
        .utf8)
private let goodStream = Array(
    #"[{"stream_id":"s1","aud":"broker","description":"shared-device-broker device d1","delivery":{"method":"urn:ietf:rfc:8936","endpoint_url":"https://login.example/contoso/ssf/poll/s1"}}]"#
        .utf8)

private nonisolated(unsafe) var streamsAnswer = HTTPResponse(status: 200)
private nonisolated(unsafe) var pollAnswer = HTTPResponse(status: 200)

private let provider = OIDCProvider(
    authority: authority,
    requester: ProviderHTTP(
        transport: { (request: HTTPRequest) async throws(HTTPError) -> HTTPResponse in
            switch request.url {
            case authority.discoveryURL: return HTTPResponse(status: 200, body: discovery)
            case "https://login.example/.well-known/ssf-configuration/contoso/v2.0":
                return HTTPResponse(status: 200, body: ssfMetadata)
            case base + "/keys": return HTTPResponse(status: 200, body: jwks)
            case base + "/oauth2/v2.0/token":
                return HTTPResponse(status: 200, body: Array(#"{"access_token":"app-1","token_type":"Bearer"}"#.utf8))
            case base + "/ssf/streams": return request.method == "GET" ? streamsAnswer : HTTPResponse(status: 409)
            default:
                if request.url.hasPrefix(base + "/ssf/status") {
                    return HTTPResponse(status: 200, body: Array(#"{"status":"enabled"}"#.utf8))
                }
                return request.url.hasPrefix("https://") ? pollAnswer : HTTPResponse(status: 404)
            }
        }, policy: .never, sleep: { _ in }),
    clock: FixedClock(), logger: quietLogger)

private let settings = SharedSignalsSettings(
    transmitter: authority, clientId: "broker", clientSecret: ClientSecret(secret: "s"), deviceId: "d1")

private func checkText(_ text: String, _ what: String) {
    if text.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" || $0.value == 0x7F }) {
        violated("\(what) holds a control character")
    }
}

private func check(_ event: SecurityEvent) {
    if event.jti.isEmpty || event.jti.utf8.count > 256 {
        violated("an event with a jti of \(event.jti.utf8.count) bytes")
    }
    checkText(event.jti, "a jti")
    if event.eventTime > event.issuedAt { violated("an event after its SET was issued") }
    for text in event.subject.emails + event.subject.userIds + [event.subject.tenant ?? ""] {
        checkText(text, "a subject")
    }
    if case .sessionEnd = event.kind, event.subject.emails.isEmpty && event.subject.userIds.isEmpty {
        violated("a session end without a subject")
    }
}

func fuzzOne(_ bytes: [UInt8]) {
    guard let mode = bytes.first else { return }
    let body = Array(bytes.dropFirst())
    if mode & 1 == 0 {
        let verifier = SecurityEventVerifier(
            issuer: base + "/v2.0", audience: "broker",
            keys: JWKSCache(uri: base + "/keys", clock: FixedClock(), fetch: { _ in jwks }), clock: FixedClock())
        guard let claims = try? JSONValue.parse(body, rules: .provider) else { return }
        do throws(SecurityEventRejection) {
            check(try verifier.read(claims))
        } catch {
            if !["invalid_request", "invalid_issuer", "invalid_audience", "invalid_key"].contains(error.code) {
                violated("a rejection with the code \(error.code)")
            }
        }
        return
    }
    streamsAnswer = HTTPResponse(status: 200, body: mode & 2 == 0 ? body : goodStream)
    pollAnswer = HTTPResponse(status: 200, body: mode & 2 == 0 ? Array(#"{"sets":{}}"#.utf8) : body)
    let receiver = SharedSignalsReceiver(settings: settings, provider: provider, logger: quietLogger)
    let result = runBlocking { () -> Result<SharedSignalsPoll, SharedSignalsError> in
        do throws(SharedSignalsError) {
            return .success(try await receiver.poll(ack: ["a\u{0}\"b"], errors: [:]))
        } catch {
            return .failure(error)
        }
    }
    guard case .success(let poll) = result else { return }
    if poll.events.count > 50 { violated("a poll gave \(poll.events.count) events") }
    for (jti, outcome) in poll.events {
        if case .success(let event) = outcome {
            if event.jti != jti { violated("an event delivered under another jti") }
            check(event)
        }
    }
}
