/// When a sign-out also ends the provider's browser session (OpenID Connect RP-initiated logout).
public enum BrowserSignOutPolicy: String, Sendable, CaseIterable, Codable {
    /// Every sign-out, whoever or whatever caused it: the default in shared mode, where the next
    /// person at the browser must not find the last one's session.
    case always
    /// Only when the app asks (`signoutFromBrowser`): the default in default mode.
    case whenAsked = "when-asked"
    /// Never, even when the app asks (the browser is not shared, or the provider's session is
    /// ended some other way).
    case never

    /// The default for a device mode.
    public static func defaultPolicy(for mode: DeviceMode) -> BrowserSignOutPolicy {
        mode == .shared ? .always : .whenAsked
    }

    /// Whether a sign-out ends the browser session, given what the app asked.
    func endsBrowserSession(appAsked: Bool) -> Bool {
        switch self {
        case .always: true
        case .whenAsked: appAsked
        case .never: false
        }
    }
}

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
    /// When a sign-out also ends the provider's browser session.
    public var browserSignOut: BrowserSignOutPolicy
    /// At most this many clientIds that hold nothing but what they saw last are remembered (the
    /// least recently active are forgotten first): any app may name a new one, and every one
    /// costs memory and state file. Apps holding a sign-in or tokens are always kept.
    public var maxClients: Int
    public static let defaultMaxClients = 1000
    /// Set when no identity provider is configured: what the administrator does about it. Sign-ins
    /// and token calls are then refused with `NotConfigured` and this text.
    public var providerNotConfigured: String?
    /// This boot of the device (the kernel's boot id), when known; kept with each sign-in.
    public var bootId: String?
    /// Whether a sign-in made in another boot ends when the broker starts (`signOutAfterReboot`).
    public var signOutAfterReboot: Bool
    /// Sign-out after inactivity (`idleSignOutSeconds`, `idleWarningSeconds`): nil when off.
    public var idleSignOut: IdleSignOut?
    /// Per clientId, the scopes every sign-in of that app asks for besides the call's own (the
    /// administrator's `defaultScopes`): a grant is what later silent calls can refresh without a
    /// person, so an app that signs in with fewer scopes than it will use gets them up front.
    public var defaultScopes: [String: [String]]

    public init(
        deviceMode: DeviceMode, brokerVersion: String, tenantId: String = "",
        knownClientIds: Set<String>? = nil, expiryMarginSeconds: Int64 = 300,
        extraDeviceInformation: [String: String] = [:], interactiveTimeout: Duration = .seconds(300),
        browserSignOut: BrowserSignOutPolicy? = nil, maxClients: Int = BrokerConfiguration.defaultMaxClients,
        providerNotConfigured: String? = nil, bootId: String? = nil, signOutAfterReboot: Bool = false,
        idleSignOut: IdleSignOut? = nil, defaultScopes: [String: [String]] = [:]
    ) {
        self.defaultScopes = defaultScopes
        self.idleSignOut = idleSignOut
        self.bootId = bootId
        self.signOutAfterReboot = signOutAfterReboot
        self.providerNotConfigured = providerNotConfigured
        // Every configured client is kept, however many the administrator named.
        self.maxClients = max(1, maxClients, knownClientIds?.count ?? 0)
        self.interactiveTimeout = interactiveTimeout
        self.browserSignOut = browserSignOut ?? .defaultPolicy(for: deviceMode)
        self.deviceMode = deviceMode
        self.brokerVersion = brokerVersion
        self.tenantId = tenantId
        self.knownClientIds = knownClientIds
        self.expiryMarginSeconds = expiryMarginSeconds
        self.extraDeviceInformation = extraDeviceInformation
    }
}

/// Sign-out after inactivity: after `after` seconds without the person's activity the device is
/// signed out, the last `warning` seconds of them announced (`SignOutPending`) so that the person
/// can stay signed in.
public struct IdleSignOut: Sendable, Equatable {
    public var after: Int64
    public var warning: Int64

    public init(after: Int64, warning: Int64 = 60) {
        self.after = max(1, after)
        self.warning = min(max(0, warning), self.after)
    }

    /// How long the person may be inactive before the warning starts.
    public var quiet: Int64 { after - warning }
}
