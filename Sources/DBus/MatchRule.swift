/// A signal match rule: registered on the bus with AddMatch and applied
/// locally to route received signals to subscribers.
public struct DBusMatchRule: Sendable, Hashable {
    /// Sender bus name (unique or well-known). Checked locally against the message's sender,
    /// which the bus sets and nobody can forge: a unique name exactly, a well-known name through
    /// its owner now (the connection follows it, see ``DBusConnection/signals(matching:bufferLimit:)``).
    /// A rule without a sender accepts a signal from any connection on the bus, including one
    /// addressed to this connection alone by a program that owns no name at all.
    public var sender: String?
    /// Object path of the emitter.
    public var path: String?
    /// Signal interface.
    public var interface: String?
    /// Signal name.
    public var member: String?
    /// Required value of the first argument when it is a string.
    public var arg0: String?

    /// Creates a rule for signals; nil fields match anything.
    public init(
        sender: String? = nil, path: String? = nil, interface: String? = nil,
        member: String? = nil, arg0: String? = nil
    ) {
        self.sender = sender
        self.path = path
        self.interface = interface
        self.member = member
        self.arg0 = arg0
    }

    /// The message type matched; always `signal`.
    public var type: String { "signal" }

    /// The rule in D-Bus match-rule syntax, e.g. `type='signal',path='/a',member='Changed'`.
    public var ruleString: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            // Inside quotes only the apostrophe needs care: close, escaped quote, reopen.
            parts.append("\(key)='" + value.replacingAll("'", with: "'\\''") + "'")
        }
        add("sender", sender)
        add("path", path)
        add("interface", interface)
        add("member", member)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    /// Throws InvalidArgs when a field is not a valid name of its kind.
    func validate() throws(DBusError) {
        if let sender { try DBusValidation.busName(sender) }
        if let path { try DBusValidation.path(path) }
        if let interface { try DBusValidation.interface(interface) }
        if let member { try DBusValidation.member(member) }
        if let arg0 { try DBusValidation.string(arg0) }
    }

    /// The bus driver's name: the sender of the bus's own signals (NameOwnerChanged), which no
    /// connection can own.
    static let busDriver = "org.freedesktop.DBus"

    /// The well-known name whose owner this rule's sender check needs followed, if any.
    var followedName: String? {
        guard let sender, !sender.hasPrefix(":"), sender != Self.busDriver else { return nil }
        return sender
    }

    /// Local filtering of a received signal. `ownerOf` gives the unique name that owns a
    /// well-known name now (nil: nobody, or not known yet, and then nothing is believed).
    /// dbus-daemon delivers a signal addressed to this connection whatever its match rules, so
    /// the rule's string on the bus filters nothing that matters: this check is the one that does.
    func matches(_ signal: DBusSignal, ownerOf: (String) -> String?) -> Bool {
        matchesContent(signal) && isFromSender(signal, ownerOf: ownerOf)
    }

    /// Everything but the sender.
    func matchesContent(_ signal: DBusSignal) -> Bool {
        if let path, path != signal.path { return false }
        if let interface, interface != signal.interface { return false }
        if let member, member != signal.member { return false }
        if let arg0 {
            guard case .string(let first)? = signal.arguments.first, first == arg0 else { return false }
        }
        return true
    }

    func isFromSender(_ signal: DBusSignal, ownerOf: (String) -> String?) -> Bool {
        guard let sender else { return true }
        let expected = sender.hasPrefix(":") || sender == Self.busDriver ? sender : ownerOf(sender)
        return expected != nil && expected == signal.sender
    }
}

extension String {
    /// Replaces every occurrence of `target` (no Foundation).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty, contains(target) else { return self }
        var result = ""
        var rest = self[...]
        while let range = rest.firstRange(of: target) {
            result += rest[..<range.lowerBound]
            result += replacement
            rest = rest[range.upperBound...]
        }
        result += rest
        return result
    }
}
