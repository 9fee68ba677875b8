/// The broker's one error type: a code from the contract's table and a message a person can act on.
///
/// Messages never contain a token, code or password.
public struct BrokerFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: BrokerErrorCode
    public var message: String
    /// For a refused refresh: the refresh token itself is still good (the provider refused what
    /// was asked with it, such as scopes beyond its grant), so the broker keeps it.
    public var refreshTokenStillValid = false

    public init(_ code: BrokerErrorCode, _ message: String, refreshTokenStillValid: Bool = false) {
        self.code = code
        self.message = message
        self.refreshTokenStillValid = refreshTokenStillValid
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
