/// The one rule for text that comes from outside brokerd: a provider's claims and error texts, a
/// caller's arguments, the state file, the configuration, a program's path. Every layer applies
/// it where such text enters, and again where text leaves (the bus, a log line, a terminal), so
/// that one bad string can neither stop a message nor forge a line.
///
/// The rule: text may hold any Unicode scalar except a control character (Unicode's `Cc`,
/// U+0000 to U+001F and U+007F to U+009F) other than tab. Invalid UTF-8 never reaches a Swift
/// `String` (decoding replaces it with U+FFFD, or a strict reader refuses it), so this is the
/// whole of it. NUL cannot travel on D-Bus at all: libdbus refuses the whole message, so one NUL
/// in a display name would cost every app its `AccountChanged`. The other controls have no place
/// in a name or a message and do harm where text is shown: ESC and CSI (U+009B) drive terminals,
/// BEL rings, CR, LF and NEL (U+0085) start lines that a log reader takes for the broker's own.
///
/// Each boundary either replaces (``cleaned(_:)``: the provider's texts, which the broker cannot
/// send back) or refuses (``check(_:)``: the state file, which brokerd only ever writes clean,
/// and the configuration, which a person can fix). Text put into a log line, an error message or
/// a terminal goes through ``escaped(_:)``.
public enum OutsideText {
    /// What a refused character becomes in ``cleaned(_:)``.
    public static let replacement: Unicode.Scalar = "\u{FFFD}"

    /// Whether the rule admits `scalar` in text brokerd keeps or sends.
    public static func admits(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "\t" || !isControl(scalar)
    }

    /// `text` with every character the rule refuses replaced by U+FFFD; `text` itself, without a
    /// copy, when it has none (the usual case: this runs on every string brokerd sends).
    public static func cleaned(_ text: String) -> String {
        guard needsCleaning(text) else { return text }
        var kept = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { kept.append(admits(scalar) ? scalar : replacement) }
        return String(kept)
    }

    /// Throws, saying which character and where, when the rule refuses a character of `text`:
    /// for the boundaries that refuse rather than replace.
    public static func check(_ text: String) throws(Refusal) {
        guard needsCleaning(text) else { return }
        for (offset, scalar) in text.unicodeScalars.enumerated() where !admits(scalar) {
            throw Refusal(character: scalar, position: offset + 1)
        }
    }

    /// Why ``check(_:)`` refused a text: its first refused character, and where it stands.
    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        public let character: Unicode.Scalar
        /// Counted in Unicode scalars, from 1.
        public let position: Int

        public init(character: Unicode.Scalar, position: Int) {
            self.character = character
            self.position = position
        }

        public var description: String {
            "\(OutsideText.codePoint(character)), a control character, at character \(position)"
        }
    }

    /// `text` for a log line, an error message or a terminal: every control character (tab
    /// included), the bidirectional controls and the line and paragraph separators written as
    /// `\u{1B}`, so that the text stays on its line, drives no terminal, and reads in its own
    /// order (a right-to-left override could make what follows it read backwards). `text` itself
    /// when it has none of them.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isEscaped) else { return text }
        var shown = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if isEscaped(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                shown.append(contentsOf: "\\u{\(hex.count < 2 ? "0" + hex : hex)}".unicodeScalars)
            } else {
                shown.append(scalar)
            }
        }
        return String(shown)
    }

    /// `U+0000`, as messages name a character.
    public static func codePoint(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    /// Unicode's `Cc`.
    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// What ``escaped(_:)`` writes as an escape: controls, and the invisible characters that
    /// reorder or break a line where text is shown.
    private static func isEscaped(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        // Arabic letter mark, left-to-right and right-to-left marks, embeddings and overrides,
        // isolates; line and paragraph separators.
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: true
        default: false
        }
    }

    /// Whether `text` holds a character the rule refuses, read from its UTF-8 bytes: C0 controls
    /// and DEL are single bytes below 0x80, which never occur inside a longer sequence, and
    /// U+0080 to U+009F are exactly 0xC2 followed by 0x80 to 0x9F.
    private static func needsCleaning(_ text: String) -> Bool {
        // A native string's bytes are in one buffer (the usual case): a simple pass over them
        // looks for a byte that can begin a refused character (C0 and DEL, and 0xC2, which begins
        // C1's), a third of the view iterator's instructions on a token's kilobytes (callgrind);
        // the exact check runs only when there is one (a tab is one).
        let suspect = text.utf8.withContiguousStorageIfAvailable { bytes in
            var count = 0
            for byte in bytes { count &+= byte < 0x20 || byte == 0x7F || byte == 0xC2 ? 1 : 0 }
            return count > 0
        }
        return suspect == false ? false : needsCleaning(bytes: text.utf8)
    }

    private static func needsCleaning<Bytes: Sequence<UInt8>>(bytes: Bytes) -> Bool {
        var previous: UInt8 = 0
        for byte in bytes {
            if (byte < 0x20 && byte != 0x09) || byte == 0x7F || (previous == 0xC2 && byte < 0xA0) { return true }
            previous = byte
        }
        return false
    }
}
