/// The bus driver's `NameOwnerChanged(s name, s oldOwner, s newOwner)`, read in this one place:
/// a name gained, changed or lost its owner (a connection that leaves the bus loses its unique
/// name the same way).
public struct DBusNameOwnerChange: Sendable, Equatable {
    /// The name whose owner changed.
    public var name: String
    /// The unique name that owned it before; nil when nobody did.
    public var oldOwner: String?
    /// The unique name that owns it now; nil when nobody does.
    public var newOwner: String?

    /// The change `signal` announces; nil for any other signal, and for one the driver did not
    /// send (its sender is the bus's to set, so no connection can claim it).
    public init?(_ signal: DBusSignal) {
        guard signal.sender == DBusMatchRule.busDriver, signal.interface == DBusMatchRule.busDriver,
            signal.member == "NameOwnerChanged", signal.arguments.count == 3,
            case .string(let name) = signal.arguments[0], case .string(let old) = signal.arguments[1],
            case .string(let new) = signal.arguments[2]
        else { return nil }
        self.name = name
        oldOwner = old.isEmpty ? nil : old
        newOwner = new.isEmpty ? nil : new
    }

    /// The rule for the driver's `NameOwnerChanged`: of `name` alone, or of every name.
    public static func rule(for name: String? = nil) -> DBusMatchRule {
        DBusMatchRule(
            sender: DBusMatchRule.busDriver, path: "/org/freedesktop/DBus", interface: DBusMatchRule.busDriver,
            member: "NameOwnerChanged", arg0: name)
    }
}
