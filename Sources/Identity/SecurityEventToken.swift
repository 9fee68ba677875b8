import BrokerCore
import JSON

/// The event types the broker asks a Shared Signals transmitter for and acts on.
public enum SecurityEventType {
    /// OpenID CAEP 1.0.
    public static let sessionRevoked = "https://schemas.openid.net/secevent/caep/event-type/session-revoked"
    public static let credentialChange = "https://schemas.openid.net/secevent/caep/event-type/credential-change"
    /// OpenID RISC 1.0.
    public static let accountDisabled = "https://schemas.openid.net/secevent/risc/event-type/account-disabled"
    /// SSF 1.0's own: a verification event, and the transmitter changing a stream's status.
    public static let verification = "https://schemas.openid.net/secevent/ssf/event-type/verification"
    public static let streamUpdated = "https://schemas.openid.net/secevent/ssf/event-type/stream-updated"

    /// What the broker requests for its stream.
    public static let requested = [sessionRevoked, credentialChange, accountDisabled]

    static func sessionEnd(_ uri: String) -> ProviderSessionEnd? {
        switch uri {
        case sessionRevoked: .sessionRevoked
        case credentialChange: .credentialChange
        case accountDisabled: .accountDisabled
        default: nil
        }
    }
}

/// One verified Security Event Token (RFC 8417) from the transmitter.
public struct SecurityEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// A session, the credentials or the account of `subject` ended.
        case sessionEnd(ProviderSessionEnd)
        /// The transmitter verifying the stream, or changing its status; nothing to do.
        case stream(String)
        /// An event type the broker did not ask for: acknowledged and ignored.
        case other(String)
    }

    public var jti: String
    public var issuedAt: Int64
    public var kind: Kind
    public var subject: EventSubject
    /// When the event happened, as the transmitter says (`event_timestamp`), never after `iat`.
    public var eventTime: Int64
}

/// Why a SET was refused, with RFC 8935/8936's error code for the transmitter (`setErrs`).
public struct SecurityEventRejection: Error, Sendable, Equatable, CustomStringConvertible {
    /// `invalid_request`, `invalid_key`, `invalid_issuer` or `invalid_audience`.
    public var code: String
    public var why: String
    /// The SET could not be checked now (the transmitter's keys could not be had): it is neither
    /// acknowledged nor reported, so the transmitter delivers it again.
    public var retryable = false

    public var description: String { why }
}

/// Checks a SET the way RFC 8417 and SSF 1.0 ask of a receiver: a compact JWS, explicitly typed
/// `secevent+jwt`, signed with a key the transmitter publishes, from the transmitter, for this
/// stream's audience, issued not in the future, with a `jti` and exactly one event.
struct SecurityEventVerifier: Sendable {
    let issuer: String
    let audience: String
    let keys: JWKSCache
    let clock: any WallClock
    /// Issuers whose `iss_sub` subjects name this provider's users: the transmitter's and the authority's.
    var subjectIssuers: [String] = []
    let allowedClockSkew: Int64 = 300

    /// The longest `jti` accepted: it is kept, so a hostile one must not be large.
    static let maximumIdLength = 256

    func verify(_ token: String) async throws(SecurityEventRejection) -> SecurityEvent {
        let header: JSONValue
        let payload: [UInt8]
        do {
            (header, payload) = try await CompactJWS.verified(token, keys: keys)
        } catch .invalidIDToken(let why) {
            throw SecurityEventRejection(code: "invalid_key", why: "the security event token: \(why)")
        } catch {
            throw SecurityEventRejection(
                code: "invalid_key", why: "the transmitter's keys could not be read (\(error)); it comes again",
                retryable: true)
        }
        // RFC 8417 2.3 and SSF 1.0 4.1.4: explicit typing keeps another JWT of the same issuer
        // (an ID token, an access token) from being taken for an event.
        guard let type = header["typ"]?.string?.lowercased(),
            type == "secevent+jwt" || type == "application/secevent+jwt"
        else {
            throw SecurityEventRejection(
                code: "invalid_request", why: "the security event token is not typed secevent+jwt")
        }
        let claims = try Self.object(payload)
        return try read(claims)
    }

    /// The checks after the signature, on the payload's claims.
    func read(_ claims: JSONValue) throws(SecurityEventRejection) -> SecurityEvent {
        guard claims["iss"]?.string == issuer else {
            throw SecurityEventRejection(
                code: "invalid_issuer", why: "the security event token is not the transmitter's")
        }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let one)?: audiences = [one]
        case .array(let many)?: audiences = many.compactMap(\.string)
        default: audiences = []
        }
        guard audiences.contains(audience) else {
            throw SecurityEventRejection(
                code: "invalid_audience", why: "the security event token is for another receiver (aud)")
        }
        guard let jti = claims["jti"]?.string, !jti.isEmpty, jti.utf8.count <= Self.maximumIdLength,
            (try? OutsideText.check(jti)) != nil
        else {
            throw SecurityEventRejection(code: "invalid_request", why: "the security event token has no usable jti")
        }
        guard let issuedAt = Self.seconds(claims["iat"]) else {
            throw SecurityEventRejection(code: "invalid_request", why: "the security event token has no iat")
        }
        guard issuedAt <= clock.now() + allowedClockSkew else {
            throw SecurityEventRejection(
                code: "invalid_request", why: "the security event token is issued in the future")
        }
        if let expiry = Self.seconds(claims["exp"]), expiry + allowedClockSkew < clock.now() {
            throw SecurityEventRejection(code: "invalid_request", why: "the security event token has expired")
        }
        // SSF 1.0 4.1.8: exactly one event per SET.
        guard case .object(let events)? = claims["events"], events.count == 1, let (uri, body) = events.first,
            case .object = body
        else {
            throw SecurityEventRejection(
                code: "invalid_request", why: "the security event token does not hold exactly one event")
        }
        // SSF 1.0 puts the subject in `sub_id`; CAEP's drafts put it in the event as `subject`.
        let subject = Self.subject(claims["sub_id"] ?? body["subject"] ?? .null, issuers: subjectIssuers)
        let kind: SecurityEvent.Kind
        if let end = SecurityEventType.sessionEnd(uri) {
            guard !subject.emails.isEmpty || !subject.userIds.isEmpty else {
                throw SecurityEventRejection(
                    code: "invalid_request", why: "the security event token names no subject the broker can match")
            }
            kind = .sessionEnd(end)
        } else if uri == SecurityEventType.verification || uri == SecurityEventType.streamUpdated {
            kind = .stream(uri)
        } else {
            kind = .other(OutsideText.cleaned(String(uri.prefix(200))))
        }
        // An event happened at the latest when its SET was issued: a later event_timestamp cannot
        // make an old SET look like news about the current sign-in.
        return SecurityEvent(
            jti: jti, issuedAt: issuedAt, kind: kind, subject: subject,
            eventTime: min(Self.seconds(body["event_timestamp"]) ?? issuedAt, issuedAt))
    }

    /// The names and ids an RFC 9493 subject identifier gives: `email`, `iss_sub` (of one of
    /// `issuers` only: another issuer's `sub` could be anyone here), `account` (`acct:` URIs),
    /// `aliases` and `complex` (its `user` and `tenant` members). `opaque` user ids are the
    /// transmitter's own and name no account; a complex subject's opaque `tenant` is its directory.
    static func subject(_ identifier: JSONValue, issuers: [String] = []) -> EventSubject {
        var subject = EventSubject()
        add(identifier, to: &subject, issuers: issuers, depth: 0)
        return subject
    }

    private static func add(_ identifier: JSONValue, to subject: inout EventSubject, issuers: [String], depth: Int) {
        // A subject nests one level (complex, aliases); deeper is no subject, and no recursion to exhaust.
        guard depth <= 2 else { return }
        func text(_ name: String) -> String? {
            identifier[name]?.string.flatMap { $0.isEmpty || $0.utf8.count > 512 ? nil : OutsideText.cleaned($0) }
        }
        switch identifier["format"]?.string {
        case "email": if let email = text("email") { subject.emails.append(email) }
        case "account":
            if let uri = text("uri"), uri.hasPrefix("acct:") { subject.emails.append(String(uri.dropFirst(5))) }
        case "iss_sub":
            if let sub = text("sub"), let issuer = identifier["iss"]?.string,
                issuers.contains(where: { SharedSignalsReceiver.sameIssuer(issuer, $0) })
            {
                subject.userIds.append(sub)
            }
        case "aliases":
            for member in identifier["identifiers"]?.array?.prefix(16) ?? [] {
                add(member, to: &subject, issuers: issuers, depth: depth + 1)
            }
        case "complex":
            if let user = identifier["user"] { add(user, to: &subject, issuers: issuers, depth: depth + 1) }
            if let tenant = identifier["tenant"], tenant["format"]?.string == "opaque",
                let id = tenant["id"]?.string, !id.isEmpty, id.utf8.count <= 512
            {
                subject.tenant = OutsideText.cleaned(id)
            }
        default: break
        }
    }

    static func object(_ bytes: [UInt8]) throws(SecurityEventRejection) -> JSONValue {
        do { return try JSONValue.providerObject(bytes, what: "the security event token's payload") } catch {
            throw SecurityEventRejection(
                code: "invalid_request", why: "the security event token's payload is not a JSON object")
        }
    }

    static func seconds(_ value: JSONValue?) -> Int64? {
        guard case .number(let number)? = value, number.isFinite, abs(number) < 9e15 else { return nil }
        return Int64(number.rounded(.down))
    }
}
