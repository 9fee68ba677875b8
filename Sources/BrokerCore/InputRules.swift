/// The limits on what callers may send; anything outside them is refused before any work.
public enum InputRules {
    public static let maxIdentifierBytes = 256
    public static let maxUsernameBytes = 4096
    public static let maxPasswordBytes = 4096
    public static let maxScopes = 64
    public static let maxScopeBytes = 256

    /// A clientId: 1 to 256 bytes of printable ASCII without spaces.
    public static func clientId(_ value: String) throws(BrokerFailure) {
        try identifier(value, what: "clientId", allowEmpty: false)
    }

    /// An accountId: empty (meaning "the signed-in account") or an identifier.
    public static func accountId(_ value: String) throws(BrokerFailure) {
        try identifier(value, what: "accountId", allowEmpty: true)
    }

    /// A flowId: 1 to 256 bytes of printable ASCII without spaces.
    public static func flowId(_ value: String) throws(BrokerFailure) {
        try identifier(value, what: "flowId", allowEmpty: false)
    }

    /// A one-time code: 1 to 64 letters or digits.
    public static func code(_ value: String) throws(BrokerFailure) {
        if value.isEmpty || value.utf8.count > 64
            || !value.unicodeScalars.allSatisfy({
                ("0"..."9").contains($0) || ("a"..."z").contains($0) || ("A"..."Z").contains($0)
            })
        {
            throw BrokerFailure(.invalidCode, "a code is 1 to 64 letters or digits; type the code from the message")
        }
    }

    public static func username(_ value: String) throws(BrokerFailure) {
        if value.isEmpty { throw BrokerFailure(.invalidUsername, "the username is empty") }
        if value.utf8.count > maxUsernameBytes {
            throw BrokerFailure(.invalidUsername, "the username is longer than \(maxUsernameBytes) bytes")
        }
        if let (offset, scalar) = value.unicodeScalars.enumerated().first(where: { !isVisibleInUsername($0.element) }) {
            throw BrokerFailure(
                .invalidUsername,
                "the username contains \(OutsideText.codePoint(scalar)) at character \(offset + 1): spaces, control "
                    + "characters and invisible formatting characters (such as U+200B or U+202E, which make one name "
                    + "look like another) are not allowed; type the name as plain text"
            )
        }
    }

    /// Whether a character may stand in a sign-in name: not a space of any kind, a control
    /// character, or a format character (zero-width spaces and joiners, direction overrides,
    /// byte order marks), which would let two different names look the same on screen.
    private static func isVisibleInUsername(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .spaceSeparator, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate:
            return false
        default:
            return true
        }
    }

    public static func password(_ value: String) throws(BrokerFailure) {
        if value.isEmpty { throw BrokerFailure(.invalidArgument, "the password is empty") }
        if value.utf8.count > maxPasswordBytes {
            throw BrokerFailure(.invalidArgument, "the password is longer than \(maxPasswordBytes) bytes")
        }
    }

    public static func scopes(_ values: [String]) throws(BrokerFailure) {
        if values.count > maxScopes {
            throw BrokerFailure(.invalidArgument, "\(values.count) scopes given; at most \(maxScopes) are allowed")
        }
        for scope in values {
            if scope.isEmpty || scope.utf8.count > maxScopeBytes
                || scope.unicodeScalars.contains(where: {
                    !isPrintableASCII($0) || $0 == " " || $0 == "\"" || $0 == "\\"
                })
            {
                throw BrokerFailure(
                    .invalidArgument,
                    "a scope must be 1 to \(maxScopeBytes) printable characters without spaces, quotes or backslashes")
            }
        }
    }

    private static func identifier(_ value: String, what: String, allowEmpty: Bool) throws(BrokerFailure) {
        if value.isEmpty {
            if allowEmpty { return }
            throw BrokerFailure(.invalidArgument, "\(what) is empty")
        }
        if value.utf8.count > maxIdentifierBytes {
            throw BrokerFailure(.invalidArgument, "\(what) is longer than \(maxIdentifierBytes) bytes")
        }
        if value.unicodeScalars.contains(where: { !isPrintableASCII($0) || $0 == " " }) {
            throw BrokerFailure(.invalidArgument, "\(what) must be printable ASCII without spaces")
        }
    }

    private static func isPrintableASCII(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value >= 0x21 && scalar.value <= 0x7E || scalar == " "
    }
}
