import Foundation

/// Test-only failure modes for the token endpoint, set through `POST /test/faults`,
/// so the broker's retry, error handling and ID-token validation can be exercised against a
/// misbehaving (or impersonated) provider.
actor FaultInjector {
    enum Mode: String, Sendable, Codable {
        case none
        /// 503, with `Retry-After` when `retryAfter` is set.
        case unavailable
        /// Answers normally after `delayMs` milliseconds.
        case slow
        /// 200 with a body that is not JSON.
        case garbage
        /// 500 with an empty body.
        case error500
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
            case .none, .unavailable, .slow, .garbage, .error500: nil
            }
        }
    }

    struct Setting: Sendable, Codable {
        var mode: Mode
        var retryAfter: Int?
        var delayMs: Int?
        /// How many token requests the fault applies to; nil means until changed.
        var count: Int?
    }

    private var setting = Setting(mode: .none)

    func set(_ setting: Setting) {
        self.setting = setting
    }

    func current() -> Setting {
        setting
    }

    /// The fault to apply to one token request, consuming one use of a counted fault.
    func take() -> Setting {
        let active = setting
        guard active.mode != .none else { return active }
        if let remaining = active.count {
            if remaining <= 0 {
                setting = Setting(mode: .none)
                return setting
            }
            setting.count = remaining - 1
            if remaining - 1 == 0 { setting = Setting(mode: .none) }
        }
        return active
    }
}
