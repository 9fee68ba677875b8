/// How one broker behaves; fixed for its lifetime.
public struct BrokerConfiguration: Sendable {
    public var deviceMode: DeviceMode
    public var brokerVersion: String
    /// The tenant the device belongs to, as the administrator configured it (may be empty).
    public var tenantId: String
    /// The clientIds allowed to use the broker; nil allows any well-formed clientId.
    public var knownClientIds: Set<String>?
    /// A cached access token is handed out only while it has more life left than this.
    public var expiryMarginSeconds: Int64
    /// Facts about the device for `extraDeviceInformation` (hostname, OS, ...).
    public var extraDeviceInformation: [String: String]
    /// How long a person has to finish an interactive sign-in in the browser.
    public var interactiveTimeout: Duration

    public init(
        deviceMode: DeviceMode, brokerVersion: String, tenantId: String = "",
        knownClientIds: Set<String>? = nil, expiryMarginSeconds: Int64 = 300,
        extraDeviceInformation: [String: String] = [:], interactiveTimeout: Duration = .seconds(300)
    ) {
        self.interactiveTimeout = interactiveTimeout
        self.deviceMode = deviceMode
        self.brokerVersion = brokerVersion
        self.tenantId = tenantId
        self.knownClientIds = knownClientIds
        self.expiryMarginSeconds = expiryMarginSeconds
        self.extraDeviceInformation = extraDeviceInformation
    }
}
