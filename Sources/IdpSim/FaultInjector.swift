import Foundation

/// Test-only failure modes for the token endpoint, set through `POST /test/faults`,
/// so the broker's retry and error handling can be exercised against a misbehaving provider.
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
