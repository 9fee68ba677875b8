import Foundation
import Hummingbird
import NIOCore

/// Test-only failure modes, set through `POST /test/faults`, so the broker's retry policy, time
/// bounds, error handling and ID-token validation can be exercised against a misbehaving (or
/// impersonated) provider. Each endpoint has its own fault; the token endpoint is the default.
actor FaultInjector {
    /// The endpoints a fault can be put on.
    enum Endpoint: String, Sendable, Codable, CaseIterable {
        case token, discovery, jwks, userinfo, revoke
        /// The device authorization endpoint (RFC 8628 3.1).
        case deviceAuthorization = "devicecode"
        /// The backchannel authentication endpoint (CIBA 7.1).
        case backchannelAuthentication = "bc-authorize"
        /// The Shared Signals transmitter's poll endpoint (RFC 8936).
        case ssf
    }

    enum Mode: String, Sendable, Codable, CaseIterable {
        case none
        /// 503, with `Retry-After` when `retryAfter` is set.
        case unavailable
        /// Answers normally after `delayMs` milliseconds.
        case slow
        /// 200 with a body that is not JSON.
        case garbage
        /// 500 with an empty body (and `Retry-After` when `retryAfter` is set).
        case error500
        /// 200 with JSON cut off in the middle of a string (the HTTP framing itself is complete).
        case truncated
        /// 200 with a valid JSON object of `sizeBytes` bytes (default 8 MiB), streamed in chunks
        /// without a `Content-Length`, so a client must enforce its limit while reading.
        case huge
        /// Handles the request as usual (a refresh token is rotated, a code is spent), then answers
        /// 504 instead: the answer is lost between the provider and the client.
        case lostAnswer
        /// JWKS only: serves a set holding another key instead of the signing key.
        case jwksWithoutKey
        /// Tokens as usual, but the ID token is signed by a key the JWKS does not hold (same `kid`).
        case idTokenWrongKey
        /// Tokens as usual, but the ID token is for another client (`aud`).
        case idTokenWrongAudience
        /// Tokens as usual, but the ID token names another issuer (`iss`).
        case idTokenWrongIssuer
        /// Tokens as usual, but the ID token expired an hour ago (`exp`).
        case idTokenExpired

        /// How this mode forges the ID token, if it is one of the forging modes.
        var forgery: IDTokenForgery? {
            switch self {
            case .idTokenWrongKey: .wrongKey
            case .idTokenWrongAudience: .wrongAudience
            case .idTokenWrongIssuer: .wrongIssuer
            case .idTokenExpired: .expired
            default: nil
            }
        }

        /// The endpoint a setting without `endpoint` applies to.
        var defaultEndpoint: Endpoint { self == .jwksWithoutKey ? .jwks : .token }

        /// Whether the mode makes sense on `endpoint`.
        func applies(to endpoint: Endpoint) -> Bool {
            if forgery != nil { return endpoint == .token }
            if self == .jwksWithoutKey { return endpoint == .jwks }
            return true
        }
    }

    struct Setting: Sendable, Codable {
        var mode: Mode
        var retryAfter: Int?
        var delayMs: Int?
        /// How many requests the fault applies to; nil means until changed.
        var count: Int?
        /// Which endpoint; nil means the mode's default (the token endpoint, or the JWKS for `jwksWithoutKey`).
        var endpoint: Endpoint?
        /// For `huge`: the body's size in bytes.
        var sizeBytes: Int?

        var target: Endpoint { endpoint ?? mode.defaultEndpoint }
    }

    private var settings: [Endpoint: Setting] = [:]

    /// Sets the fault of the setting's endpoint. `none` without an `endpoint` clears every fault.
    func set(_ setting: Setting) {
        if setting.mode == .none {
            if setting.endpoint == nil { settings = [:] } else { settings[setting.target] = nil }
            return
        }
        settings[setting.target] = setting
    }

    func current(_ endpoint: Endpoint = .token) -> Setting {
        settings[endpoint] ?? Setting(mode: .none, endpoint: endpoint)
    }

    /// The fault to apply to one request to `endpoint`, consuming one use of a counted fault.
    func take(_ endpoint: Endpoint = .token) -> Setting {
        guard let active = settings[endpoint] else { return Setting(mode: .none, endpoint: endpoint) }
        if let remaining = active.count {
            if remaining <= 0 {
                settings[endpoint] = nil
                return Setting(mode: .none, endpoint: endpoint)
            }
            settings[endpoint]?.count = remaining - 1
            if remaining - 1 == 0 { settings[endpoint] = nil }
        }
        return active
    }
}

/// What a fault does to one request: an answer instead of the normal one, a delay, or a lost answer.
enum FaultResponses {
    /// Takes the fault for `endpoint` (logging it, for tests to synchronise on) and returns the
    /// answer that replaces the normal one, or nil to answer normally (perhaps after a delay).
    static func before(_ endpoint: FaultInjector.Endpoint, provider: Provider) async -> (
        FaultInjector.Setting, Response?
    ) {
        let fault = await provider.faults.take(endpoint)
        guard fault.mode != .none else { return (fault, nil) }
        provider.logger.notice(
            "fault applied", metadata: ["endpoint": "\(endpoint.rawValue)", "mode": "\(fault.mode.rawValue)"])
        return (fault, await replacement(for: fault))
    }

    /// The normal answer, or a 504 when the fault loses it.
    static func after(_ fault: FaultInjector.Setting, _ response: Response) -> Response {
        guard fault.mode == .lostAnswer else { return response }
        return Response(
            status: .gatewayTimeout, headers: [.contentType: "text/plain"],
            body: .init(byteBuffer: ByteBuffer(string: "Gateway Timeout")))
    }

    private static func replacement(for fault: FaultInjector.Setting) async -> Response? {
        switch fault.mode {
        case .none, .lostAnswer, .jwksWithoutKey, .idTokenWrongKey, .idTokenWrongAudience, .idTokenWrongIssuer,
            .idTokenExpired:
            return nil
        case .slow:
            // The provider's own slowness, which is what is being simulated.
            try? await Task.sleep(for: .milliseconds(fault.delayMs ?? 2000))
            return nil
        case .unavailable:
            return Response(
                status: .serviceUnavailable, headers: headers("text/plain", retryAfter: fault.retryAfter),
                body: .init(byteBuffer: ByteBuffer(string: "Service Unavailable")))
        case .error500:
            return Response(status: .internalServerError, headers: headers(nil, retryAfter: fault.retryAfter))
        case .garbage:
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: "<html>this is not JSON")))
        case .truncated:
            let cut =
                #"{"token_type":"Bearer","expires_in":3600,"issuer":"http://127.0.0.1","access_token":"eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJodHRwOi8v"#
            return Response(
                status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: cut)))
        case .huge:
            return hugeResponse(size: max(64, fault.sizeBytes ?? 8 << 20))
        }
    }

    private static func headers(_ contentType: String?, retryAfter: Int?) -> HTTPFields {
        var fields: HTTPFields = [:]
        if let contentType { fields[.contentType] = contentType }
        if let retryAfter { fields[.retryAfter] = String(retryAfter) }
        return fields
    }

    /// `{"token_type":"Bearer","padding":"xxx…"}`, `size` bytes in all, in 64 KiB chunks with no
    /// `Content-Length` (chunked), so only a client that counts while reading can stop it early.
    private static func hugeResponse(size: Int) -> Response {
        let head = #"{"token_type":"Bearer","padding":""#
        let tail = #""}"#
        let padding = max(0, size - head.utf8.count - tail.utf8.count)
        let body = ResponseBody { writer in
            try await writer.write(ByteBuffer(string: head))
            let chunk = ByteBuffer(repeating: UInt8(ascii: "x"), count: 64 * 1024)
            var left = padding
            while left > 0 {
                let size = min(left, chunk.readableBytes)
                try await writer.write(chunk.getSlice(at: 0, length: size) ?? chunk)
                left -= size
            }
            try await writer.write(ByteBuffer(string: tail))
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8"], body: body)
    }
}
