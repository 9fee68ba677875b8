import BrokerCore
import BrokerPersistence
import Glibc

/// What `brokerd` was asked to do, after its command line and configuration are read.
public struct DaemonOptions: Sendable {
    public var deviceMode: DeviceMode
    /// The provider's issuer; nil when none is configured (served, refusing what needs one).
    public var authority: String?
    public var stateDirectory: String
    public var configuration: DaemonConfigurationFile
    public var busAddress: String?
    /// How long a person has to finish an interactive sign-in.
    public var interactiveTimeout: Duration
    /// How long calls in flight may take to finish once brokerd is asked to stop (SIGTERM,
    /// SIGINT); those still running then are cancelled and answered with `Cancelled`.
    public var stopGracePeriod: Duration = .seconds(10)
    /// Where the token storage was set, for advice that names that setting.
    public var tokenStorageOrigin: TokenStorageOrigin = .builtIn
    /// Where the authority was set (`--authority`, or `authority in FILE`), for its errors.
    public var authorityOrigin = "--authority"

    public init(
        deviceMode: DeviceMode, authority: String?, stateDirectory: String,
        configuration: DaemonConfigurationFile, busAddress: String? = nil,
        interactiveTimeout: Duration = .seconds(300)
    ) {
        self.interactiveTimeout = interactiveTimeout
        self.deviceMode = deviceMode
        self.authority = authority
        self.stateDirectory = stateDirectory
        self.configuration = configuration
        self.busAddress = busAddress
    }

    /// `$XDG_STATE_HOME/shared-device-broker`, or `~/.local/state/shared-device-broker`.
    public static func defaultStateDirectory() -> String { StartFailureRecord.defaultStateDirectory() }
}
