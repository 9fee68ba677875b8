/// The fixed names of the broker's D-Bus contract (see `dbus/io.shareddevice.Broker1.xml`): where
/// it is found. Its methods', signals' and properties' names are generated from the XML
/// (`Broker1Method`, `Broker1Signal`, `Broker1Property`), its dictionaries' keys from the
/// dictionaries file (`AccountKey`, ...).
///
/// Plain strings only: this module is shared by `brokerd` and the client library and
/// knows nothing of D-Bus itself.
public enum BrokerNames {
    /// The well-known bus name `brokerd` owns on the session bus.
    public static let busName = "io.shareddevice.Broker1"
    /// The one object `brokerd` exports.
    public static let objectPath = "/io/shareddevice/Broker1"
    /// The broker's interface.
    public static let interface = "io.shareddevice.Broker1"
    /// Every broker error reply is named `errorPrefix + BrokerErrorCode.rawValue`.
    public static let errorPrefix = "io.shareddevice.Broker1.Error."
}

/// The annotations of the contract XML that say what its types do not (the XML's header lists
/// them; `scripts/generate-contract.py` reads them, and they are served in introspection).
public enum ContractAnnotation {
    /// On an interface: the stem of its generated Swift names.
    public static let swiftName = "io.shareddevice.Contract.SwiftName"
    /// On a `s` argument: the app the call acts for.
    public static let clientId = "io.shareddevice.Contract.ClientId"
    /// On a method: its reply waits for a person rather than for the provider.
    public static let waitsForPerson = "io.shareddevice.Contract.WaitsForPerson"
}

/// The device modes, as the `DeviceMode` property spells them.
public enum DeviceMode: String, Sendable, CaseIterable, Codable {
    /// One account for the whole device; signing out anywhere signs out everywhere.
    case shared
    /// One account per app, as on a personal device.
    case `default`
}

/// Why the device's account changed, as the `AccountChanged` signal's `reason` spells it.
public enum AccountChangeReason: String, Sendable, CaseIterable, Codable {
    case signedIn = "signed-in"
    case signedOut = "signed-out"
}

/// Why the device was signed out (`signOutCause` in the sign-out's `AccountChanged` and result),
/// so that an app can say "You were signed out after 5 minutes without activity".
public enum SignOutCause: String, Sendable, CaseIterable, Codable {
    /// An app called `SignOut`.
    case app
    /// The person was inactive past the administrator's limit.
    case idle
    /// The screen was locked.
    case lock
    /// The device restarted since the sign-in.
    case reboot
    /// The identity provider ended the session.
    case provider
}

/// How the provider lets one app's sign-in give other apps tokens of their own, as
/// `GetDeviceInformation`'s `singleSignOn` spells them.
public enum SingleSignOnMechanism: String, Sendable, CaseIterable, Codable, Comparable {
    /// OpenID Connect Native SSO for Mobile Apps 1.0: a device secret and a token exchange.
    case nativeSSO = "native-sso"
    /// Refresh tokens that any client of a family may redeem (Entra's `foci`).
    case familyRefreshToken = "family-refresh-token"
    /// OAuth 2.0 Token Exchange (RFC 8693) of the signed-in app's token.
    case tokenExchange = "token-exchange"

    /// The order the broker tries them in, and lists them in: the one that spends nothing and
    /// asks the most of the provider (a device session bound to the sign-in) first, then a
    /// family's refresh token, then an exchange of the app's own token. Stated here, not by the
    /// order of the cases: a mechanism added is placed on purpose (a test checks every case is).
    public static let tryingOrder: [Self] = [.nativeSSO, .familyRefreshToken, .tokenExchange]

    public static func < (a: Self, b: Self) -> Bool {
        tryingOrder.firstIndex(of: a) ?? tryingOrder.count < tryingOrder.firstIndex(of: b) ?? tryingOrder.count
    }
}

/// The sign-in flows, as `GetSignInOptions`'s `flows` and `StartSignIn`'s `method` option spell
/// them. This is where a flow is registered: each property below is a switch without a default,
/// so a flow added here must say how it is started and whether it starts single sign-on, and the
/// compiler then names every place that must handle it (its core file, its provider, the adapter
/// of the call that starts it).
public enum SignInFlow: String, Sendable, CaseIterable, Codable {
    /// `SignInWithPassword`: native authentication's password path, or the password grant.
    case password
    /// `StartSignIn`: a one-time code by email (native authentication); `SubmitCode` finishes it.
    case emailCode = "email-code"
    /// `AcquireTokenInteractive`: the provider's page in the system browser.
    case browser
    /// `StartSignIn` with method `device-code`: a code entered on another device (RFC 8628);
    /// `FinishSignIn` waits for it.
    case deviceCode = "device-code"
    /// `StartSignIn` with method `ciba`: the provider asks the person (the username given) to
    /// approve on their phone (OpenID Connect CIBA, poll mode); `FinishSignIn` waits for it.
    case ciba

    /// The contract's call that starts the flow.
    public var startedBy: Broker1Method {
        switch self {
        case .password: .signInWithPassword
        case .emailCode, .deviceCode, .ciba: .startSignIn
        case .browser: .acquireTokenInteractive
        }
    }

    /// Whether the person finishes it on another device while the broker polls the provider,
    /// and `FinishSignIn` waits for it.
    public var isPolled: Bool {
        switch self {
        case .deviceCode, .ciba: true
        case .password, .emailCode, .browser: false
        }
    }

    /// Whether a sign-in by this flow anchors single sign-on: the provider is asked for Native
    /// SSO's device secret with it, and other apps then get tokens of their own from it.
    public var startsSingleSignOn: Bool {
        switch self {
        case .password, .emailCode, .browser, .deviceCode, .ciba: true
        }
    }

    /// The flow in words, for messages ("the device code sign-in's token request").
    public var inWords: String {
        switch self {
        case .password: "password sign-in"
        case .emailCode: "one-time code sign-in"
        case .browser: "browser sign-in"
        case .deviceCode: "device code sign-in"
        case .ciba: "phone approval sign-in"
        }
    }

    /// The flows `StartSignIn` starts, by its `method` option; the first is its default.
    public static let startedBySignInMethod: [Self] = allCases.filter { $0.startedBy == .startSignIn }
}

/// Keys of the options dictionaries (`a{sv}`) methods accept.
public enum OptionKey {
    /// `s`, AcquireTokenInteractive: `select_account`, `login`, `consent` or `none`.
    public static let prompt = "prompt"
    /// `s`, AcquireTokenInteractive: the username to suggest.
    public static let loginHint = "loginHint"
    /// `s`, AcquireTokenInteractive: a caller-chosen id with which `CancelSignIn` can end the flow.
    public static let flowId = "flowId"
    /// `b`, AcquireTokenSilent: skip the cache and use the refresh token.
    public static let forceRefresh = "forceRefresh"
    /// `s`: a claims request (a resource's claims challenge), for AcquireTokenSilent and AcquireTokenInteractive.
    public static let claims = "claims"
    /// `b`, SignOut: also end the provider's browser session.
    public static let signoutFromBrowser = "signoutFromBrowser"
    /// `s`, StartSignIn: the ``SignInFlow`` (`email-code`, `device-code` or `ciba`), `email-code` when absent.
    public static let method = "method"
}

/// Where an interactive sign-in stands, as the `SignInProgress` signal's `stage` spells it.
public enum SignInStage: String, Sendable, CaseIterable {
    /// The sign-in page was handed to the browser; `details` carries its `url`, so that an app
    /// can show it ("Continue in your browser") or a person can open it by hand.
    case browserOpened = "browser-opened"
    /// No browser could be opened (no desktop portal, no `xdg-open` or `$BROWSER` that worked);
    /// `details` carries the page's `url` and the `reason`. The sign-in still waits, until its
    /// deadline, for a person to open the page by hand in a browser on this device.
    case browserUnavailable = "browser-unavailable"
    /// Waiting for the person to finish in the browser.
    case waiting
    /// The browser came back with the provider's answer.
    case codeReceived = "code-received"
    /// The broker is getting the tokens from the provider.
    case exchanging
}

/// The names of Microsoft's Linux identity broker protocol, which brokerd also serves when asked
/// (`--compat microsoft-broker1`); its methods are ``MicrosoftBroker1Method``.
public enum MicrosoftBroker1Names {
    public static let busName = "com.microsoft.identity.broker1"
    public static let objectPath = "/com/microsoft/identity/broker1"
    public static let interface = "com.microsoft.identity.Broker1"
}

/// Keys of `extraDeviceInformation` that brokerd sets besides the host's facts.
public enum DeviceFact {
    /// `s`: the other brokers' bus names brokerd serves (space-separated), when it serves any.
    public static let compatibility = "compatibility"
    /// `s`: present when no identity provider is configured, saying what to set and where.
    public static let providerNotConfigured = "providerNotConfigured"
    /// `s`: with `signOutOnLock`, what brokerd hears the screen lock from (or that nothing was found).
    public static let screenLock = "screenLock"
    /// `s`: with `idleSignOutSeconds`, what brokerd learns the person's inactivity from.
    public static let idleSource = "idleSource"
    /// `s`: present while the provider's discovery document cannot be read: why, and what to check.
    public static let discoveryError = "discoveryError"
    /// `s`: with `sharedSignals`, how receiving the provider's events goes: the stream and its
    /// last poll, or what fails and when brokerd tries again.
    public static let sharedSignals = "sharedSignals"
    /// `s`: with `sessionCheckSeconds`, how the last check of the device's sign-in at the provider went.
    public static let sessionCheck = "sessionCheck"
}
