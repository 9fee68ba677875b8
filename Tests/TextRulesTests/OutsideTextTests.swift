import Testing
import TextRules

/// The one rule for outside text: what it admits, replaces, refuses and escapes.
@Suite("Outside text: the one rule")
struct OutsideTextTests {
    @Test("the rule refuses exactly the control characters (Cc) other than tab")
    func admitsAllButControls() throws {
        // Every scalar of the Basic Multilingual Plane (every one- to three-byte UTF-8 sequence,
        // where the byte-level shortcut could go wrong) and a few beyond it.
        for value in Array(0...0xFFFF) + [0x1_0000, 0x1_F600, 0x10_FFFF] {
            guard let scalar = Unicode.Scalar(value) else { continue }  // surrogates
            let expected = scalar == "\t" || scalar.properties.generalCategory != .control
            #expect(OutsideText.admits(scalar) == expected, "\(OutsideText.codePoint(scalar))")
            let text = "a" + String(Character(scalar)) + "b"
            let cleaned = OutsideText.cleaned(text)
            #expect(cleaned == (expected ? text : "a\u{FFFD}b"), "\(OutsideText.codePoint(scalar))")
            if expected {
                try OutsideText.check(text)
            } else {
                #expect(throws: OutsideText.Refusal(character: scalar, position: 2)) { try OutsideText.check(text) }
            }
        }
    }

    @Test("a display name from a hostile provider: NUL, ESC, BEL and DEL replaced, the rest kept")
    func cleansAName() throws {
        let name = "Mallory\u{0}\u{1B}[31m\u{7}\u{7F}\u{202E}evil\tName\u{85}\u{9B}"
        let replaced = "Mallory\u{FFFD}\u{FFFD}[31m\u{FFFD}\u{FFFD}\u{202E}evil\tName\u{FFFD}\u{FFFD}"
        #expect(OutsideText.cleaned(name) == replaced)
        // Clean text comes back as it is; cleaning twice is cleaning once.
        for text in ["", "Alice Example", "Zoë Ångström", "山田太郎", "👩‍💻", "tab\there"] {
            #expect(OutsideText.cleaned(text) == text)
        }
        #expect(OutsideText.cleaned(OutsideText.cleaned(name)) == OutsideText.cleaned(name))
    }

    @Test("invalid UTF-8 is replaced when bytes become a String, before the rule sees it")
    func invalidUTF8() {
        let text = String(decoding: [0x61, 0xFF, 0xC0, 0xAF, 0xED, 0xA0, 0x80, 0x62], as: UTF8.self)
        #expect(text.unicodeScalars.allSatisfy { $0 == "a" || $0 == "b" || $0 == OutsideText.replacement })
        #expect(OutsideText.cleaned(text) == text)
    }

    @Test("a refusal names the character and where it stands")
    func refusal() {
        #expect(throws: OutsideText.Refusal.self) { try OutsideText.check("Zoë\u{0}") }
        do {
            try OutsideText.check("Zoë\u{0}")
        } catch {
            #expect(error.position == 4)
            #expect(error.description == "U+0000, a control character, at character 4")
        }
    }

    @Test("escaped: one line, no terminal control, no reordering; plain text as it is")
    func escapes() {
        #expect(OutsideText.escaped("abc\n<2>critical forged") == #"abc\u{0A}<2>critical forged"#)
        #expect(OutsideText.escaped("\u{1B}[2J\u{7}\r\u{0}") == #"\u{1B}[2J\u{07}\u{0D}\u{00}"#)
        #expect(OutsideText.escaped("a\tb\u{9B}c\u{85}") == #"a\u{09}b\u{9B}c\u{85}"#)
        #expect(OutsideText.escaped("txt.\u{202E}exe\u{2066}\u{2028}") == #"txt.\u{202E}exe\u{2066}\u{2028}"#)
        for text in ["", "Alice Example", "Zoë \u{FFFD}", "👩‍💻 山田", #"C:\path\u{41}"#] {
            #expect(OutsideText.escaped(text) == text)
        }
        let hostile = "x\u{0}\u{1B}\u{202E}\n"
        #expect(OutsideText.escaped(OutsideText.escaped(hostile)) == OutsideText.escaped(hostile))
        #expect(OutsideText.escaped(hostile).unicodeScalars.allSatisfy { $0.isASCII && $0.value >= 0x20 })
    }

    @Test func codePoints() {
        #expect(OutsideText.codePoint("\u{0}") == "U+0000")
        #expect(OutsideText.codePoint("\u{202E}") == "U+202E")
        #expect(OutsideText.codePoint("\u{1F600}") == "U+1F600")
    }
}
