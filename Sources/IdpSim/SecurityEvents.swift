import Foundation
import JWTKit

/// The events the Shared Signals transmitter sends, as an administrator's actions cause them.
enum SecurityEventType: String, Sendable, CaseIterable, Codable {
    /// CAEP: every session of the subject was revoked.
    case sessionRevoked = "session-revoked"
    /// CAEP: the subject's password was changed (reset by an administrator).
    case credentialChange = "credential-change"
    /// RISC: the subject's account was disabled.
    case accountDisabled = "account-disabled"

    var uri: String {
        switch self {
        case .sessionRevoked: "https://schemas.openid.net/secevent/caep/event-type/session-revoked"
        case .credentialChange: "https://schemas.openid.net/secevent/caep/event-type/credential-change"
        case .accountDisabled: "https://schemas.openid.net/secevent/risc/event-type/account-disabled"
        }
    }

    /// Why, in the administrator's words (`reason_admin`).
    var reason: String {
        switch self {
        case .sessionRevoked: "An administrator revoked the user's sessions."
        case .credentialChange: "An administrator reset the user's password."
        case .accountDisabled: "An administrator disabled the user's account."
        }
    }

    /// SSF 1.0 §8.1.4: the transmitter's answer to a receiver's verification request.
    static let verificationURI = "https://schemas.openid.net/secevent/ssf/event-type/verification"

    static let supportedURIs = allCases.map(\.uri)
}

/// An RFC 9493 subject identifier without nesting: `email` or `opaque`.
struct SimpleSubject: Codable, Sendable, Equatable {
    var format: String
    var email: String?
    var id: String?
}

/// An RFC 9493 subject identifier: simple, or `complex` with a `user` and a `tenant`.
struct SubjectIdentifier: Codable, Sendable, Equatable {
    var format: String
    var email: String?
    var id: String?
    var user: SimpleSubject?
    var tenant: SimpleSubject?

    static func user(_ username: String, tenant: String) -> SubjectIdentifier {
        SubjectIdentifier(
            format: "complex", user: SimpleSubject(format: "email", email: username),
            tenant: SimpleSubject(format: "opaque", id: tenant))
    }

    static func opaque(_ id: String) -> SubjectIdentifier {
        SubjectIdentifier(format: "opaque", id: id)
    }
}

/// One event's payload; the absent fields are left out of the JSON.
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct SecurityEventPayload: Codable, Sendable, Equatable {
    var event_timestamp: Int?
    var initiating_entity: String?
    var reason_admin: [String: String]?
    var credential_type: String?
    var change_type: String?
    var state: String?

    static func admin(_ type: SecurityEventType, at date: Date) -> SecurityEventPayload {
        var payload = SecurityEventPayload(
            event_timestamp: Int(date.timeIntervalSince1970), initiating_entity: "admin",
            reason_admin: ["en": type.reason])
        if type == .credentialChange {
            payload.credential_type = "password"
            payload.change_type = "update"
        }
        return payload
    }
}

/// A Security Event Token's claims (RFC 8417 §2.2) with one event, as SSF 1.0 profiles them.
// Field names are the JSON's own (snake_case), so that Codable needs no key table.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct SecurityEventClaims: JWTPayload, Equatable {
    var iss: String
    var aud: String
    var iat: Int
    var jti: String
    var sub_id: SubjectIdentifier
    var events: [String: SecurityEventPayload]

    /// A SET has no expiry of its own (RFC 8417 §2.2); the receiver judges `iat`.
    func verify(using _: some JWTAlgorithm) async throws {}
}

/// Ways a test can ask for a SET that a receiver must refuse.
enum SecurityEventForgery: String, Sendable, Codable, CaseIterable {
    case none
    /// Signed by a fresh key under the published `kid`.
    case wrongKey
    /// For another client (`aud`).
    case wrongAudience
    /// From another issuer (`iss`).
    case wrongIssuer
    /// The SET last delivered on the stream, queued again with the same `jti` and bytes.
    case replay
    /// Issued two days ago (`iat`).
    case expired
}
