/// The broker's errors: the one table mapping each to its D-Bus error name.
///
/// `brokerd` replies `BrokerNames.errorPrefix + rawValue`; the client library reads the
/// name back with ``init(dbusErrorName:)``. Add a case here and both sides know it.
public enum BrokerErrorCode: String, Sendable, CaseIterable, Codable {
    case invalidArgument = "InvalidArgument"
    case unknownClient = "UnknownClient"
    case userNotFound = "UserNotFound"
    case invalidUsername = "InvalidUsername"
    case invalidPassword = "InvalidPassword"
    case accountAlreadySignedIn = "AccountAlreadySignedIn"
    case noAccount = "NoAccount"
    case interactionRequired = "InteractionRequired"
    case serverUnavailable = "ServerUnavailable"
    case serverError = "ServerError"
    case notSupported = "NotSupported"
    case accessDenied = "AccessDenied"
    case limitsExceeded = "LimitsExceeded"
    case invalidCode = "InvalidCode"
    case codeExpired = "CodeExpired"
    case flowNotFound = "FlowNotFound"
    case cancelled = "Cancelled"
    case storageFailed = "StorageFailed"
    case storageLocked = "StorageLocked"
    case browserUnavailable = "BrowserUnavailable"
    case notConfigured = "NotConfigured"

    /// The full D-Bus error name, e.g. `io.shareddevice.Broker1.Error.NoAccount`.
    public var dbusErrorName: String { BrokerNames.errorPrefix + rawValue }

    /// The code for a D-Bus error name, or nil when the name is not one of the broker's.
    public init?(dbusErrorName: String) {
        guard dbusErrorName.hasPrefix(BrokerNames.errorPrefix) else { return nil }
        self.init(rawValue: String(dbusErrorName.dropFirst(BrokerNames.errorPrefix.count)))
    }
}
