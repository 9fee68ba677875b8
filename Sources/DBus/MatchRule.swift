/// A signal match rule: registered on the bus with AddMatch and applied
/// locally to route received signals to subscribers.
public struct DBusMatchRule: Sendable, Hashable {
    /// Sender bus name (unique or well-known). Only unique names are also checked locally.
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

    /// Local filtering of a received signal.
    func matches(_ signal: DBusSignal) -> Bool {
        if let path, path != signal.path { return false }
        if let interface, interface != signal.interface { return false }
        if let member, member != signal.member { return false }
        if let sender, sender.hasPrefix(":"), sender != signal.sender { return false }
        if let arg0 {
            guard case .string(let first)? = signal.arguments.first, first == arg0 else { return false }
        }
        return true
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
