/// `org.freedesktop.DBus.Properties.PropertiesChanged(s interface_name, a{sv} changed_properties,
/// as invalidated_properties)`, read in this one place: some of an object's properties changed,
/// those in `changed` with their new values, those in `invalidated` without.
public struct DBusPropertiesChange: Sendable, Equatable {
    /// The properties' interface.
    public var interface: String
    /// The properties that changed, with their new values (variants unwrapped).
    public var changed: [String: DBusValue]
    /// The properties that changed without their new values: they are read again.
    public var invalidated: [String]

    /// The properties interface, whose signal this is.
    public static let propertiesInterface = "org.freedesktop.DBus.Properties"

    /// The change `signal` announces; nil for any other signal, and for one whose arguments are not
    /// exactly `(sa{sv}as)` (a value wrapped in another variant is another shape too).
    public init?(_ signal: DBusSignal) {
        guard signal.interface == Self.propertiesInterface, signal.member == "PropertiesChanged",
            signal.arguments.count == 3, case .string(let interface) = signal.arguments[0],
            case .dictionary(keySignature: "s", valueSignature: "v", _) = signal.arguments[1],
            let changed = signal.arguments[1].vardict,
            case .array(elementSignature: "s", _) = signal.arguments[2],
            let invalidated = signal.arguments[2].stringArray
        else { return nil }
        self.interface = interface
        self.changed = changed
        self.invalidated = invalidated
    }

    /// Whether `property` changed, with or without its value.
    public func mentions(_ property: String) -> Bool {
        changed[property] != nil || invalidated.contains(property)
    }

    /// The rule for the changes of `interface`'s properties announced by `sender` (a well-known name
    /// is believed only from its owner), at `path` when given.
    public static func rule(sender: String, path: String? = nil, interface: String) -> DBusMatchRule {
        DBusMatchRule(
            sender: sender, path: path, interface: propertiesInterface, member: "PropertiesChanged", arg0: interface)
    }
}
