/// A string as a JSON string literal (RFC 8259), written the way Foundation's `JSONEncoder`
/// writes one with `.withoutEscapingSlashes`: `"` and `\` escaped, `\n`, `\r`, `\t`, `\b` and
/// `\f` by name, every other control character as `\u00xx`, everything else (slashes, non-ASCII)
/// as it is. The one escaper of the JSON the Swift layers write by hand.
public enum JSONString {
    /// `string`, quoted.
    public static func quoted(_ string: String) -> String {
        var text = ""
        append(string, to: &text)
        return text
    }

    /// `string`, quoted, at the end of `text`.
    public static func append(_ string: String, to text: inout String) {
        text += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case "\u{8}": text += "\\b"
            case "\u{c}": text += "\\f"
            case let control where control.value < 0x20:
                let hex = String(control.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }
}
