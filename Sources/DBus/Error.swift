/// A D-Bus error: a well-known error name plus a human-readable message.
///
/// Error replies received from peers keep their name and message. Handlers of
/// exported objects throw `DBusError` to send a specific error reply.
public struct DBusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The error name, e.g. `org.freedesktop.DBus.Error.Failed`.
    public var name: String
    /// The human-readable message (may be empty).
    public var message: String

    /// Creates an error with the given name and message.
    public init(name: String, message: String = "") {
        self.name = name
        self.message = message
    }

    /// `name: message`, or just the name when the message is empty.
    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    /// Prefix of the standard error names.
    static let prefix = "org.freedesktop.DBus.Error."

    /// `org.freedesktop.DBus.Error.Failed`: generic failure.
    public static func failed(_ message: String) -> DBusError { .init(name: prefix + "Failed", message: message) }
    /// `org.freedesktop.DBus.Error.InvalidArgs`: wrong arguments or invalid input.
    public static func invalidArgs(_ message: String) -> DBusError {
        .init(name: prefix + "InvalidArgs", message: message)
    }
    /// `org.freedesktop.DBus.Error.UnknownMethod`.
    public static func unknownMethod(_ message: String = "Unknown method") -> DBusError {
        .init(name: prefix + "UnknownMethod", message: message)
    }
    /// `org.freedesktop.DBus.Error.UnknownInterface`.
    public static func unknownInterface(_ message: String = "Unknown interface") -> DBusError {
        .init(name: prefix + "UnknownInterface", message: message)
    }
    /// `org.freedesktop.DBus.Error.UnknownObject`.
    public static func unknownObject(_ message: String = "Unknown object") -> DBusError {
        .init(name: prefix + "UnknownObject", message: message)
    }
    /// `org.freedesktop.DBus.Error.UnknownProperty`.
    public static func unknownProperty(_ message: String = "Unknown property") -> DBusError {
        .init(name: prefix + "UnknownProperty", message: message)
    }
    /// `org.freedesktop.DBus.Error.PropertyReadOnly`.
    public static func propertyReadOnly(_ message: String = "Property is read-only") -> DBusError {
        .init(name: prefix + "PropertyReadOnly", message: message)
    }
    /// `org.freedesktop.DBus.Error.NoReply`: the call's deadline passed without a reply.
    public static func noReply(_ message: String = "Did not receive a reply") -> DBusError {
        .init(name: prefix + "NoReply", message: message)
    }
    /// `org.freedesktop.DBus.Error.Disconnected`: the connection is closed or dropped.
    public static func disconnected(_ message: String = "Connection is closed") -> DBusError {
        .init(name: prefix + "Disconnected", message: message)
    }
    /// `org.freedesktop.DBus.Error.Timeout`.
    public static func timeout(_ message: String = "Timed out") -> DBusError {
        .init(name: prefix + "Timeout", message: message)
    }
    /// `org.freedesktop.DBus.Error.ServiceUnknown`: no owner for the destination name.
    public static func serviceUnknown(_ message: String = "Service unknown") -> DBusError {
        .init(name: prefix + "ServiceUnknown", message: message)
    }
    /// `org.freedesktop.DBus.Error.AccessDenied`.
    public static func accessDenied(_ message: String = "Access denied") -> DBusError {
        .init(name: prefix + "AccessDenied", message: message)
    }
    /// `org.freedesktop.DBus.Error.LimitsExceeded`.
    public static func limitsExceeded(_ message: String = "Limits exceeded") -> DBusError {
        .init(name: prefix + "LimitsExceeded", message: message)
    }
    /// `org.freedesktop.DBus.Error.NoMemory`.
    public static func noMemory(_ message: String = "Out of memory") -> DBusError {
        .init(name: prefix + "NoMemory", message: message)
    }
    /// `org.freedesktop.DBus.Error.NotSupported`.
    public static func notSupported(_ message: String) -> DBusError {
        .init(name: prefix + "NotSupported", message: message)
    }
    /// `org.freedesktop.DBus.Error.MatchRuleNotFound`.
    public static func matchRuleNotFound(_ message: String = "Match rule not found") -> DBusError {
        .init(name: prefix + "MatchRuleNotFound", message: message)
    }
}
