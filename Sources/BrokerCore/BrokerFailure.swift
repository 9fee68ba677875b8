/// The broker's one error type: a code from the contract's table and a message a person can act on.
///
/// Messages never contain a token, code or password.
public struct BrokerFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: BrokerErrorCode
    public var message: String
    /// For a refused refresh: the refresh token itself is still good (the provider refused what
    /// was asked with it, such as scopes beyond its grant), so the broker keeps it.
    public var refreshTokenStillValid = false
    /// For a refused refresh: the provider said the grant itself is gone (`invalid_grant`,
    /// `expired_token`): revoked, expired, or its session or account ended. Any other refusal
    /// (a policy asking for the person, a client it no longer serves) does not say the session ended.
    public var grantEnded = false

    public init(
        _ code: BrokerErrorCode, _ message: String, refreshTokenStillValid: Bool = false, grantEnded: Bool = false
    ) {
        self.code = code
        self.message = message
        self.refreshTokenStillValid = refreshTokenStillValid
        self.grantEnded = grantEnded
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
