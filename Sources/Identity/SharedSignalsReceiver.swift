import BrokerCore
import FoundationEssentials
import HTTP
import JSON
import Logging
import TextRules

/// How brokerd reaches its Shared Signals transmitter (the administrator's `sharedSignals`).
public struct SharedSignalsSettings: Sendable {
    /// The transmitter's issuer: its metadata is at `/.well-known/ssf-configuration` + the path.
    public var transmitter: Authority
    /// The broker's own confidential client at the configured authority (client-credentials grant).
    public var clientId: String
    public var clientSecret: ClientSecret
    /// `scope` of the client-credentials request, when the provider wants one.
    public var scope: String?
    /// This device's id: its stream is named after it, so that devices sharing a client each
    /// find their own (an event polled from a stream is delivered to one poller only).
    public var deviceId: String

    public init(
        transmitter: Authority, clientId: String, clientSecret: ClientSecret, scope: String? = nil, deviceId: String
    ) {
        self.transmitter = transmitter
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.scope = scope
        self.deviceId = deviceId
    }

    /// The `description` of this device's stream.
    var streamDescription: String { "shared-device-broker device \(deviceId)" }

    /// SSF 1.0 7.2.1: the well-known segment goes between the host and the issuer's path, as RFC 8414 does.
    public var metadataURL: String {
        // The authority is checked absolute http(s): the host ends at the first "/" after "//".
        let url = transmitter.url
        let afterScheme = url.hasPrefix("https://") ? 8 : 7
        let rest = url.dropFirst(afterScheme)
        let pathStart = rest.firstIndex(of: "/") ?? url.endIndex
        return String(url[..<pathStart]) + "/.well-known/ssf-configuration" + String(url[pathStart...])
    }
}

/// What went wrong with the transmitter; never a reason to sign anyone out.
public enum SharedSignalsError: Error, Sendable, CustomStringConvertible {
    /// Down, slow, failing, or answering what the standards do not say: try again later.
    case unavailable(String)
    /// The transmitter no longer has the stream: make it again.
    case streamGone(String)
    /// A configuration to fix (no transmitter at that address, the client refused, poll delivery not offered).
    case misconfigured(String)

    public var description: String {
        switch self {
        case .unavailable(let why), .streamGone(let why), .misconfigured(let why): why
        }
    }
}

/// What one poll brought: each SET verified or refused, by its `jti`, and whether more wait.
public struct SharedSignalsPoll: Sendable {
    public var events: [(jti: String, result: Result<SecurityEvent, SecurityEventRejection>)]
    public var moreAvailable: Bool
}

/// The stream brokerd receives on, as the transmitter described it.
public struct SharedSignalsStream: Sendable, Equatable {
    public var id: String
    public var pollURL: String
    public var audience: String
    public var eventsDelivered: [String]?
}

/// A Shared Signals Framework 1.0 receiver with poll delivery (RFC 8936), which works from
/// behind NAT as a kiosk is: the transmitter's metadata, an access token from the client-
/// credentials grant at the broker's authority, one stream (reused when the transmitter has
/// one for this client, made otherwise), and polls that acknowledge what was processed.
/// Every SET is verified here (``SecurityEventVerifier``); what to do about it is the core's.
public actor SharedSignalsReceiver {
    public nonisolated let settings: SharedSignalsSettings
    private let provider: OIDCProvider
    private let requester: ProviderHTTP
    private let clock: any WallClock
    private let logger: Logger

    private var metadata: JSONValue?
    /// The issuer exactly as the metadata gives it: what every SET's `iss` must be.
    private var transmitterIssuer: String?
    private var accessToken: (value: String, expires: Int64)?
    private var stream: SharedSignalsStream?
    private var verifier: SecurityEventVerifier?

    /// At most this many SETs per poll, each at most this large: a transmitter cannot make one
    /// answer unbounded work.
    static let maxEvents = 50
    static let maximumTokenBytes = 64 * 1024

    public init(settings: SharedSignalsSettings, provider: OIDCProvider, logger: Logger) {
        self.settings = settings
        self.provider = provider
        self.requester = provider.requester
        self.clock = provider.clock
        self.logger = logger
    }

    /// The stream, made or found on first use.
    public func connect() async throws(SharedSignalsError) -> SharedSignalsStream {
        if let stream { return stream }
        let made = try await findOrCreateStream()
        stream = made
        return made
    }

    /// Forgets the stream (and what was read with it), so the next ``connect()`` finds or makes one.
    public func forgetStream() {
        stream = nil
        verifier = nil
        metadata = nil
        transmitterIssuer = nil
    }

    /// One poll (RFC 8936 2.4): acknowledges `ack`, reports `errors`, and returns what came.
    public func poll(ack: [String], errors: [String: SecurityEventRejection]) async throws(SharedSignalsError)
        -> SharedSignalsPoll
    {
        let stream = try await connect()
        var body = JSONWriter()
        body.raw("{\"maxEvents\":\(Self.maxEvents),\"returnImmediately\":true,\"ack\":")
        body.strings(ack)
        body.raw(",\"setErrs\":{")
        for (index, (jti, rejection)) in errors.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { body.raw(",") }
            body.string(jti)
            body.raw(":{\"err\":")
            body.string(rejection.code)
            body.raw(",\"description\":")
            body.string(rejection.why)
            body.raw("}")
        }
        body.raw("}}")
        let response = try await authorizedSend(
            method: "POST", url: stream.pollURL, json: body.text, what: "the Shared Signals poll")
        let answer = try streamAnswer(response, of: stream, what: "the Shared Signals poll")
        guard case .object(let sets)? = answer["sets"] else {
            throw SharedSignalsError.unavailable("the Shared Signals poll's answer has no sets object")
        }
        guard let verifier else { throw SharedSignalsError.unavailable("the stream's verifier is gone") }
        var events: [(jti: String, result: Result<SecurityEvent, SecurityEventRejection>)] = []
        for (jti, value) in sets.sorted(by: { $0.key < $1.key }).prefix(Self.maxEvents) {
            guard let token = value.string, token.utf8.count <= Self.maximumTokenBytes else {
                events.append((jti, .failure(.init(code: "invalid_request", why: "the SET is not a compact JWS"))))
                continue
            }
            do throws(SecurityEventRejection) {
                let event = try await verifier.verify(token)
                // RFC 8936 2.5: each SET is keyed by its own jti.
                guard event.jti == jti else {
                    throw SecurityEventRejection(
                        code: "invalid_request", why: "the SET's jti is not the key it was delivered under")
                }
                events.append((jti, .success(event)))
            } catch {
                events.append((jti, .failure(error)))
            }
        }
        return SharedSignalsPoll(events: events, moreAvailable: answer["moreAvailable"] == .bool(true))
    }

    /// The stream's status (SSF 1.0 8.1.2.1): `enabled`, `paused` or `disabled`, and the
    /// transmitter's reason; nil when the transmitter has no status endpoint.
    public func status() async throws(SharedSignalsError) -> (status: String, reason: String?)? {
        let stream = try await connect()
        // The bearer token goes there: HTTPS, or HTTP to the loopback only.
        guard let endpoint = metadata?["status_endpoint"]?.string, (try? Authority.checkedHost(of: endpoint)) != nil
        else { return nil }
        let response = try await authorizedSend(
            method: "GET",
            url: endpoint + (endpoint.contains("?") ? "&" : "?") + "stream_id=" + HTTPRequest.percentEncode(stream.id),
            json: nil, what: "the Shared Signals stream status")
        let answer = try streamAnswer(response, of: stream, what: "the Shared Signals status")
        guard let status = answer["status"]?.string else {
            throw SharedSignalsError.unavailable("the Shared Signals status names no status")
        }
        return (
            OutsideText.cleaned(String(status.prefix(40))),
            answer["reason"]?.string.map { OutsideText.cleaned(String($0.prefix(200))) }
        )
    }

    /// The JSON object a request about `stream` was answered with; a 404 means the transmitter
    /// no longer has the stream, which is forgotten so that the next try makes or finds one.
    private func streamAnswer(_ response: HTTPResponse, of stream: SharedSignalsStream, what: String)
        throws(SharedSignalsError) -> JSONValue
    {
        if response.status == 404 {
            forgetStream()
            throw SharedSignalsError.streamGone("the transmitter no longer has the stream \(stream.id) (404)")
        }
        guard response.status == 200 else {
            throw SharedSignalsError.unavailable("\(what) answered HTTP \(response.status)")
        }
        return try Self.object(response.body, what: "\(what)'s answer")
    }

    // MARK: Metadata and stream

    private func transmitterMetadata() async throws(SharedSignalsError) -> JSONValue {
        if let metadata { return metadata }
        let url = settings.metadataURL
        let response: HTTPResponse
        do {
            response = try await requester.send(.get(url), what: "the Shared Signals metadata", replay: .idempotent)
        } catch {
            throw SharedSignalsError.unavailable("the transmitter's metadata could not be read: \(error)")
        }
        guard response.status == 200 else {
            let fix =
                [400, 404, 405, 410].contains(response.status)
                ? SharedSignalsError.misconfigured(
                    "there is no Shared Signals transmitter at \(settings.transmitter) (its metadata, \(url), answered "
                        + "HTTP \(response.status)): check sharedSignals.transmitter")
                : SharedSignalsError.unavailable("the transmitter's metadata answered HTTP \(response.status)")
            throw fix
        }
        let document = try Self.object(response.body, what: "the transmitter's metadata")
        let issuer = document["issuer"]?.string ?? ""
        guard Self.sameIssuer(issuer, settings.transmitter.url) else {
            let found = OutsideText.cleaned(String(issuer.prefix(200)))
            throw SharedSignalsError.misconfigured(
                "the metadata at \(url) is another transmitter's (its issuer is \"\(found)\", not "
                    + "\(settings.transmitter)): check sharedSignals.transmitter")
        }
        transmitterIssuer = issuer
        let methods = document["delivery_methods_supported"]?.array?.compactMap(\.string) ?? []
        guard methods.contains(Self.pollDelivery) else {
            throw SharedSignalsError.misconfigured(
                "the transmitter at \(settings.transmitter) does not offer poll delivery (RFC 8936), which brokerd uses"
            )
        }
        for name in ["configuration_endpoint", "jwks_uri"] {
            guard let endpoint = document[name]?.string, (try? Authority.checkedHost(of: endpoint)) != nil else {
                throw SharedSignalsError.misconfigured(
                    "the transmitter's metadata has no usable \(name) (an https URL, or http to the loopback)")
            }
        }
        metadata = document
        return document
    }

    static let pollDelivery = "urn:ietf:rfc:8936"

    /// Issuers compared as the configuration gives them, but for a trailing "/" (which the
    /// configured URL loses when it is read as an authority).
    static func sameIssuer(_ a: String, _ b: String) -> Bool {
        func trimmed(_ text: String) -> Substring {
            var text = Substring(text)
            while text.hasSuffix("/") { text = text.dropLast() }
            return text
        }
        return !a.isEmpty && trimmed(a) == trimmed(b)
    }

    private func findOrCreateStream() async throws(SharedSignalsError) -> SharedSignalsStream {
        let document = try await transmitterMetadata()
        guard let configuration = document["configuration_endpoint"]?.string,
            let jwksURI = document["jwks_uri"]?.string
        else { throw SharedSignalsError.misconfigured("the transmitter's metadata lost its endpoints") }
        let existing = try await authorizedSend(
            method: "GET", url: configuration, json: nil, what: "the Shared Signals stream configuration")
        var found: JSONValue?
        if existing.status == 200 {
            // SSF 1.0 8.1.1.2: an array of the receiver's streams (some transmitters answer the one object).
            let answer: JSONValue
            do {
                answer = try JSONValue.providerValue(existing.body, what: "the Shared Signals stream configuration")
            } catch {
                throw SharedSignalsError.unavailable("\(error)")
            }
            let streams = answer.array ?? [answer]
            found = streams.first {
                $0["delivery"]?["method"]?.string == Self.pollDelivery
                    && $0["description"]?.string == settings.streamDescription
            }
        }
        if found == nil {
            var body = JSONWriter()
            body.raw("{\"delivery\":{\"method\":")
            body.string(Self.pollDelivery)
            body.raw("},\"events_requested\":")
            body.strings(SecurityEventType.requested)
            body.raw(",\"description\":")
            body.string(settings.streamDescription)
            body.raw("}")
            let created = try await authorizedSend(
                method: "POST", url: configuration, json: body.text, what: "the Shared Signals stream creation")
            switch created.status {
            case 200, 201:
                found = try Self.object(created.body, what: "the new Shared Signals stream")
            case 409:
                // SSF 1.0 lets a transmitter keep one stream per receiver: another device's, here.
                throw SharedSignalsError.misconfigured(
                    "the transmitter keeps one stream per client, and another device's stream holds it (HTTP 409): "
                        + "give each device a sharedSignals.clientId of its own")
            case 400...499:
                throw SharedSignalsError.misconfigured(
                    "the transmitter refused to make a stream (HTTP \(created.status)): check sharedSignals")
            default:
                throw SharedSignalsError.unavailable("the Shared Signals stream creation answered \(created.status)")
            }
        }
        guard let config = found, let id = config["stream_id"]?.string, !id.isEmpty,
            let pollURL = config["delivery"]?["endpoint_url"]?.string, (try? Authority.checkedHost(of: pollURL)) != nil
        else {
            throw SharedSignalsError.unavailable(
                "the transmitter's stream has no stream_id or poll endpoint_url (an https URL, or http to the loopback)"
            )
        }
        let audiences: [String]
        switch config["aud"] {
        case .string(let one)?: audiences = [one]
        case .array(let many)?: audiences = many.compactMap(\.string)
        default: audiences = []
        }
        let audience = audiences.contains(settings.clientId) ? settings.clientId : audiences.first ?? settings.clientId
        let delivered = config["events_delivered"]?.array?.compactMap(\.string)
        if let delivered {
            let missing = SecurityEventType.requested.filter { !delivered.contains($0) }
            if !missing.isEmpty {
                logger.warning(
                    "the transmitter does not deliver every event brokerd asked for",
                    metadata: ["missing": "\(missing.joined(separator: " "))"])
            }
        }
        verifier = SecurityEventVerifier(
            issuer: transmitterIssuer ?? settings.transmitter.url, audience: audience,
            keys: JWKSCache(uri: jwksURI, requester: requester, clock: clock, logger: logger), clock: clock,
            subjectIssuers: [transmitterIssuer ?? settings.transmitter.url, provider.authority])
        let stream = SharedSignalsStream(
            id: OutsideText.cleaned(id), pollURL: pollURL, audience: audience, eventsDelivered: delivered)
        logger.info(
            "receiving Shared Signals", metadata: ["stream": "\(stream.id)", "transmitter": "\(settings.transmitter)"])
        return stream
    }

    // MARK: Access token

    /// Sends a request with the broker's own access token; a 401 gets one new token and one more try.
    private func authorizedSend(method: String, url: String, json: String?, what: String)
        async throws(SharedSignalsError) -> HTTPResponse
    {
        var renewed = false
        while true {
            let token = try await bearerToken(renew: renewed)
            var request = HTTPRequest(
                method: method, url: url, headers: [HTTPHeader("Authorization", "Bearer \(token)")],
                body: json.map { Array($0.utf8) } ?? [])
            if json != nil { request.headers.append(HTTPHeader("Content-Type", "application/json")) }
            let response: HTTPResponse
            do { response = try await requester.send(request, what: what, replay: .idempotent) } catch {
                throw SharedSignalsError.unavailable("\(what) failed: \(error)")
            }
            if response.status == 401 && !renewed {
                renewed = true
                continue
            }
            if response.status == 401 || response.status == 403 {
                throw SharedSignalsError.misconfigured(
                    "the transmitter refused brokerd's client \(settings.clientId) (HTTP \(response.status)): check "
                        + "sharedSignals.clientId and its secret")
            }
            return response
        }
    }

    /// The client-credentials grant (RFC 6749 4.4) at the authority's token endpoint; kept until
    /// a minute before it expires.
    private func bearerToken(renew: Bool) async throws(SharedSignalsError) -> String {
        if !renew, let accessToken, accessToken.expires > clock.now() + 60 { return accessToken.value }
        let tokenEndpoint: String
        do { tokenEndpoint = try await provider.endpoints().tokenEndpoint } catch {
            throw SharedSignalsError.unavailable("the authority's discovery document could not be read: \(error)")
        }
        var fields = [("grant_type", "client_credentials")]
        if let scope = settings.scope { fields.append(("scope", scope)) }
        var headers: [HTTPHeader] = []
        switch settings.clientSecret.method {
        case .basic:
            let pair =
                HTTPRequest.percentEncode(settings.clientId) + ":"
                + HTTPRequest.percentEncode(settings.clientSecret.secret)
            headers.append(HTTPHeader("Authorization", "Basic " + Data(pair.utf8).base64EncodedString()))
            fields.insert(("client_id", settings.clientId), at: 0)
        case .post:
            fields += [("client_id", settings.clientId), ("client_secret", settings.clientSecret.secret)]
        }
        let response: HTTPResponse
        do {
            response = try await requester.send(
                .postForm(tokenEndpoint, fields: fields, headers: headers),
                what: "the Shared Signals client's token request", replay: .idempotent)
        } catch {
            throw SharedSignalsError.unavailable("the Shared Signals client's token could not be had: \(error)")
        }
        guard response.status == 200 else {
            let refusal = OIDCProvider.oauthError(response)
            if response.status >= 500 { throw SharedSignalsError.unavailable("\(refusal)") }
            throw SharedSignalsError.misconfigured(
                "the authority refused brokerd's Shared Signals client \(settings.clientId) (\(refusal)): check "
                    + "sharedSignals.clientId and its secret")
        }
        let body = try Self.object(response.body, what: "the Shared Signals client's token answer")
        guard let value = body["access_token"]?.string, !value.isEmpty, (try? OutsideText.check(value)) != nil else {
            throw SharedSignalsError.unavailable("the Shared Signals client's token answer has no access_token")
        }
        let lifetime = min(max(0, body["expires_in"]?.int64 ?? 3600), OIDCProvider.maximumTokenLifetime)
        accessToken = (value, clock.now() + lifetime)
        return value
    }

    static func object(_ bytes: [UInt8], what: String) throws(SharedSignalsError) -> JSONValue {
        do { return try JSONValue.providerObject(bytes, what: what) } catch {
            throw SharedSignalsError.unavailable("\(what) is not JSON: \(error)")
        }
    }
}
