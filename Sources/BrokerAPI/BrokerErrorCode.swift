/// The broker's errors: the one table mapping each to its D-Bus error name.
///
/// `brokerd` replies `BrokerNames.errorPrefix + rawValue`; the client library reads the
/// name back with ``init(dbusErrorName:)``. Add a case here, with its doc comment (what an app
/// reads of it), and `make contract`: both sides know it, and the client library's `BrokerError`
/// gets its case.
public enum BrokerErrorCode: String, Sendable, CaseIterable, Codable {
    /// An empty, oversized or malformed argument or option.
    case invalidArgument = "InvalidArgument"
    /// The broker (or the provider) does not know this clientId.
    case unknownClient = "UnknownClient"
    /// The provider has no such user.
    case userNotFound = "UserNotFound"
    /// An empty username, or one with spaces or control characters.
    case invalidUsername = "InvalidUsername"
    /// The provider refused the username and password.
    case invalidPassword = "InvalidPassword"
    /// Shared mode, and someone else is signed in on the device.
    case accountAlreadySignedIn = "AccountAlreadySignedIn"
    /// Nobody is signed in, or the account named is not.
    case noAccount = "NoAccount"
    /// No valid token and no usable refresh token; call the interactive flow
    /// (MSAL: `MSALError.interactionRequired`).
    case interactionRequired = "InteractionRequired"
    /// The provider cannot be reached, or is overloaded.
    case serverUnavailable = "ServerUnavailable"
    /// The provider answered something invalid or unexpected.
    case serverError = "ServerError"
    /// This broker or provider does not offer the call.
    case notSupported = "NotSupported"
    /// The broker refused the caller.
    case accessDenied = "AccessDenied"
    /// Too many requests or flows.
    case limitsExceeded = "LimitsExceeded"
    /// A wrong one-time code; the flow stays usable.
    case invalidCode = "InvalidCode"
    /// The one-time code is too old; ask for a new one.
    case codeExpired = "CodeExpired"
    /// The sign-in flow ended (finished, cancelled, or timed out).
    case flowNotFound = "FlowNotFound"
    /// The sign-in was cancelled, by the app or because nobody finished it.
    case cancelled = "Cancelled"
    /// The broker could not save its state; nothing changed.
    case storageFailed = "StorageFailed"
    /// The keyring the broker keeps tokens in is locked; unlock it (the broker
    /// serves tokens again the moment it is, without a restart). Accounts are answered meanwhile.
    case storageLocked = "StorageLocked"
    /// The broker could not open a browser for an interactive sign-in
    /// (no desktop portal, no `xdg-open`, no `$BROWSER`), and nobody opened the sign-in page by hand
    /// in time. The message has the page's address; a device-code sign-in needs no browser here.
    /// Also, at once, when every port the administrator fixed for the browser's return
    /// (`loopbackRedirectPorts`) is taken; the message names them.
    case browserUnavailable = "BrowserUnavailable"
    /// No identity provider is configured on this device yet; the message says
    /// which file the administrator edits. Device mode and accounts are answered meanwhile.
    case notConfigured = "NotConfigured"

    /// The full D-Bus error name, e.g. `io.shareddevice.Broker1.Error.NoAccount`.
    public var dbusErrorName: String { BrokerNames.errorPrefix + rawValue }

    /// The code for a D-Bus error name, or nil when the name is not one of the broker's.
    public init?(dbusErrorName: String) {
        guard dbusErrorName.hasPrefix(BrokerNames.errorPrefix) else { return nil }
        self.init(rawValue: String(dbusErrorName.dropFirst(BrokerNames.errorPrefix.count)))
    }
}
