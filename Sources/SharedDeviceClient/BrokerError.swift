import BrokerAPI
import DBus
import Glibc

// The cases, their codes and messages are generated from the error table
// (BrokerErrorCases.swift); this is how the library reads and shows them.
extension BrokerError: CustomStringConvertible {
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

    /// How the message of a `brokerUnavailable` begins when no bus could be reached at all.
    static let cannotConnectPrefix = "could not connect to"

    /// The D-Bus error name this stands for (broker errors keep theirs). No bus is libdbus's
    /// `NoServer`, not `ServiceUnknown`: that is a bus that answered without the broker on it.
    public var errorName: String {
        switch self {
        case .brokerUnavailable(let message) where message.hasPrefix(Self.cannotConnectPrefix):
            return "org.freedesktop.DBus.Error.NoServer"
        case .brokerUnavailable: return "org.freedesktop.DBus.Error.ServiceUnknown"
        case .timedOut: return "org.freedesktop.DBus.Error.NoReply"
        case .dbus(let name, _): return name
        default: return code.map { $0.dbusErrorName } ?? "org.freedesktop.DBus.Error.Failed"
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

extension BrokerError {
    /// A reply or signal that is not what the contract says (a broker of another version, or not
    /// the broker): `what` names the part.
    static func malformedReply(_ what: String) -> BrokerError {
        .dbus(
            name: "org.freedesktop.DBus.Error.InvalidSignature",
            message: "the broker's reply is not what the contract says: \(what)")
    }
}
