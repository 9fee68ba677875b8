import BrokerAPI
import DBus
import Glibc

/// Everything that can go wrong in a call to the broker: one case per broker error name
/// (`io.shareddevice.Broker1.Error.*`), plus what can happen on the way.
public enum BrokerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `InvalidArgument`: an empty, oversized or malformed argument or option.
    case invalidArgument(String)
    /// `UnknownClient`: the broker (or the provider) does not know this clientId.
    case unknownClient(String)
    /// `UserNotFound`: the provider has no such user.
    case userNotFound(String)
    /// `InvalidUsername`: an empty username, or one with spaces or control characters.
    case invalidUsername(String)
    /// `InvalidPassword`: the provider refused the username and password.
    case invalidPassword(String)
    /// `AccountAlreadySignedIn`: shared mode, and someone else is signed in on the device.
    case accountAlreadySignedIn(String)
    /// `NoAccount`: nobody is signed in, or the account named is not.
    case noAccount(String)
    /// `InteractionRequired`: no valid token and no usable refresh token; call the interactive flow
    /// (MSAL: `MSALError.interactionRequired`).
    case interactionRequired(String)
    /// `ServerUnavailable`: the provider cannot be reached, or is overloaded.
    case serverUnavailable(String)
    /// `ServerError`: the provider answered something invalid or unexpected.
    case serverError(String)
    /// `NotSupported`: this broker or provider does not offer the call.
    case notSupported(String)
    /// `AccessDenied`: the broker refused the caller.
    case accessDenied(String)
    /// `LimitsExceeded`: too many requests or flows.
    case limitsExceeded(String)
    /// `InvalidCode`: a wrong one-time code; the flow stays usable.
    case invalidCode(String)
    /// `CodeExpired`: the one-time code is too old; ask for a new one.
    case codeExpired(String)
    /// `FlowNotFound`: the sign-in flow ended (finished, cancelled, or timed out).
    case flowNotFound(String)
    /// `Cancelled`: the sign-in was cancelled, by the app or because nobody finished it.
    case cancelled(String)
    /// `StorageFailed`: the broker could not save its state; nothing changed.
    case storageFailed(String)
    /// `StorageLocked`: the keyring the broker keeps tokens in is locked; unlock it (the broker
    /// serves tokens again the moment it is, without a restart). Accounts are answered meanwhile.
    case storageLocked(String)
    /// `BrowserUnavailable`: the broker could not open a browser for an interactive sign-in
    /// (no desktop portal, no `xdg-open`, no `$BROWSER`), and nobody opened the sign-in page by hand
    /// in time. The message has the page's address; a device-code sign-in needs no browser here.
    case browserUnavailable(String)
    /// `NotConfigured`: no identity provider is configured on this device yet; the message says
    /// which file the administrator edits. Device mode and accounts are answered meanwhile.
    case notConfigured(String)
    /// No broker answers on the bus (not running, or restarting).
    case brokerUnavailable(String)
    /// The broker did not answer in time.
    case timedOut(String)
    /// Any other D-Bus error; the payload carries its name.
    case dbus(name: String, message: String)

    /// Maps a broker error code, through the contract's single table.
    init(code: BrokerErrorCode, message: String) {
        switch code {
        case .invalidArgument: self = .invalidArgument(message)
        case .unknownClient: self = .unknownClient(message)
        case .userNotFound: self = .userNotFound(message)
        case .invalidUsername: self = .invalidUsername(message)
        case .invalidPassword: self = .invalidPassword(message)
        case .accountAlreadySignedIn: self = .accountAlreadySignedIn(message)
        case .noAccount: self = .noAccount(message)
        case .interactionRequired: self = .interactionRequired(message)
        case .serverUnavailable: self = .serverUnavailable(message)
        case .serverError: self = .serverError(message)
        case .notSupported: self = .notSupported(message)
        case .accessDenied: self = .accessDenied(message)
        case .limitsExceeded: self = .limitsExceeded(message)
        case .invalidCode: self = .invalidCode(message)
        case .codeExpired: self = .codeExpired(message)
        case .flowNotFound: self = .flowNotFound(message)
        case .cancelled: self = .cancelled(message)
        case .storageFailed: self = .storageFailed(message)
        case .storageLocked: self = .storageLocked(message)
        case .browserUnavailable: self = .browserUnavailable(message)
        case .notConfigured: self = .notConfigured(message)
        }
    }

    /// Reads a D-Bus error reply.
    init(_ error: DBusError) {
        if let code = BrokerErrorCode(dbusErrorName: error.name) {
            self.init(code: code, message: error.message)
            return
        }
        switch error.name {
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.FileNotFound",
            "org.freedesktop.DBus.Error.NoServer", "org.freedesktop.DBus.Error.SpawnFailed":
            self = .brokerUnavailable("the broker is not running on this bus (\(error.message))")
        case let name where name.hasPrefix("org.freedesktop.DBus.Error.Spawn."):
            // The bus tried to start it and it failed: its own words are in the file it leaves when
            // the bus started it, else (under systemd) in the journal.
            // Only a failure of this start: each activation that fails writes it afresh, and an
            // older one (a start that died without writing) would name the wrong cause.
            if let failure = StartFailureRecord.read(), Int64(time(nil)) - failure.time < 60 {
                self = .brokerUnavailable(
                    "the broker could not be started (\(error.message)): \(failure.message) (from "
                        + "\(StartFailureRecord.defaultPath))")
            } else {
                self = .brokerUnavailable(
                    "the broker could not be started (\(error.message)); its log says why: journalctl --user -u "
                        + "shared-device-broker")
            }
        case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout",
            "org.freedesktop.DBus.Error.TimedOut":
            self = .timedOut("the broker did not answer in time (\(error.message))")
        default:
            self = .dbus(name: error.name, message: error.message)
        }
    }

    /// The D-Bus error name this stands for (broker errors keep theirs).
    public var errorName: String {
        switch self {
        case .brokerUnavailable: return "org.freedesktop.DBus.Error.ServiceUnknown"
        case .timedOut: return "org.freedesktop.DBus.Error.NoReply"
        case .dbus(let name, _): return name
        default: return code.map { $0.dbusErrorName } ?? "org.freedesktop.DBus.Error.Failed"
        }
    }

    /// The broker's error code, for errors the broker itself replied.
    public var code: BrokerErrorCode? {
        switch self {
        case .invalidArgument: return .invalidArgument
        case .unknownClient: return .unknownClient
        case .userNotFound: return .userNotFound
        case .invalidUsername: return .invalidUsername
        case .invalidPassword: return .invalidPassword
        case .accountAlreadySignedIn: return .accountAlreadySignedIn
        case .noAccount: return .noAccount
        case .interactionRequired: return .interactionRequired
        case .serverUnavailable: return .serverUnavailable
        case .serverError: return .serverError
        case .notSupported: return .notSupported
        case .accessDenied: return .accessDenied
        case .limitsExceeded: return .limitsExceeded
        case .invalidCode: return .invalidCode
        case .codeExpired: return .codeExpired
        case .flowNotFound: return .flowNotFound
        case .cancelled: return .cancelled
        case .storageFailed: return .storageFailed
        case .storageLocked: return .storageLocked
        case .browserUnavailable: return .browserUnavailable
        case .notConfigured: return .notConfigured
        case .brokerUnavailable, .timedOut, .dbus: return nil
        }
    }

    /// The message a person can act on.
    public var message: String {
        switch self {
        case .invalidArgument(let m), .unknownClient(let m), .userNotFound(let m), .invalidUsername(let m),
            .invalidPassword(let m), .accountAlreadySignedIn(let m), .noAccount(let m), .interactionRequired(let m),
            .serverUnavailable(let m), .serverError(let m), .notSupported(let m), .accessDenied(let m),
            .limitsExceeded(let m), .invalidCode(let m), .codeExpired(let m), .flowNotFound(let m), .cancelled(let m),
            .storageFailed(let m), .storageLocked(let m), .browserUnavailable(let m), .notConfigured(let m),
            .brokerUnavailable(let m),
            .timedOut(let m), .dbus(_, let m):
            return m
        }
    }

    /// Whether the app should fall back to interactive sign-in (as MSAL's `interactionRequired`).
    public var isInteractionRequired: Bool {
        if case .interactionRequired = self { return true }
        return false
    }

    /// Whether the person (or the app) cancelled a sign-in (MSAL: `MSALError.userCanceled`).
    public var isCancelled: Bool {
        if case .cancelled = self { return true }
        return false
    }

    /// Whether no broker answered (not running, restarting, or no bus): worth a retry later.
    public var isBrokerUnavailable: Bool {
        if case .brokerUnavailable = self { return true }
        return false
    }

    /// `Name: message`.
    public var description: String { "\(errorName): \(message)" }
}
