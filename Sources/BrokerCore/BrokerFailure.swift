/// The broker's one error type: a code from the contract's table and a message a person can act on.
///
/// Messages never contain a token, code or password.
public struct BrokerFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: BrokerErrorCode
    public var message: String

    public init(_ code: BrokerErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
