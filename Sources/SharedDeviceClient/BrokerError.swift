import BrokerAPI
import DBus

/// Everything that can go wrong in a call to the broker: one case per broker error name
/// (`io.shareddevice.Broker1.Error.*`), plus what can happen on the way.
public enum BrokerError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidArgument(String)
    case unknownClient(String)
    case userNotFound(String)
    case invalidUsername(String)
    case invalidPassword(String)
    case accountAlreadySignedIn(String)
    case noAccount(String)
    /// Silent sign-in is not possible; call the interactive flow.
    case interactionRequired(String)
    case serverUnavailable(String)
    case serverError(String)
    case notSupported(String)
    case accessDenied(String)
    case limitsExceeded(String)
    case invalidCode(String)
    case codeExpired(String)
    case flowNotFound(String)
    case cancelled(String)
    case storageFailed(String)
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
             .storageFailed(let m), .brokerUnavailable(let m), .timedOut(let m), .dbus(_, let m):
            return m
        }
    }

    /// Whether the app should fall back to interactive sign-in (as MSAL's `interactionRequired`).
    public var isInteractionRequired: Bool {
        if case .interactionRequired = self { return true }
        return false
    }

    /// `Name: message`.
    public var description: String { "\(errorName): \(message)" }
}
