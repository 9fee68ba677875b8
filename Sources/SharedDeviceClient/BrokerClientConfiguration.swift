/// How an app reaches the broker (MSAL: `MSALPublicClientApplicationConfig`; the authority and
/// redirect URI live in the broker, set by the device's administrator).
public struct BrokerClientConfiguration: Sendable {
    /// The bus to use; nil means the session bus (`DBUS_SESSION_BUS_ADDRESS`).
    public var busAddress: String?
    /// For queries (device information, current account, accounts).
    public var queryTimeout: Duration
    /// For sign-in and token calls, which may wait for the identity provider.
    public var tokenTimeout: Duration
    /// For interactive sign-in, which waits for a person.
    public var interactiveTimeout: Duration

    /// The defaults: the session bus, 10 s for queries, 60 s for tokens, 10 min for interaction.
    public init(
        busAddress: String? = nil, queryTimeout: Duration = .seconds(10),
        tokenTimeout: Duration = .seconds(60), interactiveTimeout: Duration = .seconds(600)
    ) {
        self.busAddress = busAddress
        self.queryTimeout = queryTimeout
        self.tokenTimeout = tokenTimeout
        self.interactiveTimeout = interactiveTimeout
    }
}
