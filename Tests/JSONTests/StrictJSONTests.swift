import Testing

@testable import JSON

/// The one strict reader: what it refuses under each set of rules, and the tree it reads.
@Suite("JSON: the strict reader")
struct StrictJSONTests {
    static let everyRule: [StrictJSON.Rules] = [.configuration, .request, .provider]

    private func parse(_ text: String, _ rules: StrictJSON.Rules = .provider) throws(StrictJSON.Problem) -> JSONValue {
        try JSONValue.parse(Array(text.utf8), rules: rules)
    }

    @Test("anything but RFC 8259 is refused, whatever the rules", arguments: everyRule.indices)
    func notJSON(rules: Int) {
        let rules = Self.everyRule[rules]
        let refused = [
            "", " ", "{", "{\"a\":1,}", "[1,]", "[1 2]", "{\"a\" 1}", "{a:1}", "{'a':1}", "// c\n{}", "{} x",
            "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":+1}", "{\"a\":NaN}",
            "{\"a\":Infinity}", "{\"a\":tru}", "{\"a\":nul}", "{\"a\":\"\u{01}\"}", "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}", "{\"a\":\"\\ud800\\u0041\"}",
            "\u{FEFF}{}",
        ]
        for text in refused {
            #expect(throws: StrictJSON.Problem.self, "\(text.debugDescription)") {
                _ = try JSONValue.parse(Array(text.utf8), rules: rules)
            }
        }
        // A check without a tree decodes strings only where their characters are checked.
        for text in refused where !text.contains("\\u") || rules.allowsControlCharacters == false {
            #expect(throws: StrictJSON.Problem.self, "\(text.debugDescription)") {
                try StrictJSON.check(Array(text.utf8), rules: rules)
            }
        }
        #expect(throws: StrictJSON.Problem.self) { try JSONValue.parse([0x22, 0xC3, 0x28, 0x22], rules: rules) }
        #expect(throws: StrictJSON.Problem.self) { try JSONValue.parse([0x5B, 0xFF, 0x5D], rules: rules) }
    }

    @Test("a key given twice is refused, in every object and under every rule", arguments: everyRule.indices)
    func duplicateKeys(rules: Int) {
        let rules = Self.everyRule[rules]
        #expect(throws: StrictJSON.Problem.duplicateKey("a", place: "at the top level")) {
            try JSONValue.parse(Array(#"{"a":1,"b":2,"a":1}"#.utf8), rules: rules)
        }
        // The same key once escaped is still the same key.
        #expect(throws: StrictJSON.Problem.duplicateKey("a", place: "in b[0]")) {
            try JSONValue.parse(Array(#"{"b":[{"a":"x","\u0061":"y"}]}"#.utf8), rules: rules)
        }
        #expect(throws: Never.self) { try JSONValue.parse(Array(#"{"a":{"a":1},"b":{"a":2}}"#.utf8), rules: rules) }
    }

    @Test("nesting deeper than 256 is refused, not a stack overflow")
    func depth() throws {
        let deep = String(repeating: "[", count: 257) + String(repeating: "]", count: 257)
        #expect(throws: StrictJSON.Problem.self) { try parse(deep) }
        let allowed = String(repeating: "[", count: 256) + String(repeating: "]", count: 256)
        #expect(throws: Never.self) { try parse(allowed) }
        let hostile = String(repeating: "{\"a\":", count: 100_000)
        #expect(throws: StrictJSON.Problem.self) { try parse(hostile) }
    }

    @Test("null and control characters follow the rules")
    func nullAndControlCharacters() throws {
        #expect(throws: StrictJSON.Problem.null(path: "clients")) {
            try StrictJSON.check(Array(#"{"clients":null}"#.utf8), rules: .configuration)
        }
        #expect(throws: StrictJSON.Problem.controlCharacter(0, place: "a.b[1]")) {
            try StrictJSON.check(Array(#"{"a":{"b":["x","p\u0000q"]}}"#.utf8), rules: .configuration)
        }
        #expect(throws: StrictJSON.Problem.controlCharacter(0x85, place: "a key at the top level")) {
            try StrictJSON.check(Array("{\"k\u{85}\":1}".utf8), rules: .configuration)
        }
        // A provider's and a request's strings may hold them: their readers clean them where they enter.
        for rules in [StrictJSON.Rules.request, .provider] {
            #expect(try parse(#"{"a":null,"b":"p\u0000q"}"#, rules) == .object(["a": .null, "b": .string("p\0q")]))
        }
    }

    @Test("numbers: RFC 8259's grammar, and nothing beyond a double")
    func numbers() throws {
        #expect(
            try parse(#"{"a":-0.5e2,"b":12345678901234567890,"c":0}"#)
                == .object(["a": .number(-50), "b": .number(12_345_678_901_234_567_890), "c": .number(0)]))
        #expect(throws: StrictJSON.Problem.numberOutOfRange(path: "a")) { try parse(#"{"a":1e400}"#) }
        #expect(throws: StrictJSON.Problem.numberOutOfRange(path: "a[0]")) { try parse(#"{"a":[-1e400]}"#) }
        #expect(try parse(#"{"a":"-9223372036854775808"}"#)["a"]?.int64 == nil)
        #expect(try parse(#"{"a":"3600"}"#)["a"]?.int64 == 3600)
    }

    @Test("the tree holds what the text says, escapes decoded")
    func tree() throws {
        let value = try parse(
            #" {"s":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","t":true,"f":false,"n":null,"a":[1,[]],"o":{}} "#)
        #expect(
            value
                == .object([
                    "s": .string("a\"\\/\u{8}\u{c}\n\r\té😀"), "t": .bool(true), "f": .bool(false), "n": .null,
                    "a": .array([.number(1), .array([])]), "o": .object([:]),
                ]))
        // Written back, keys in order, it reads the same.
        #expect(value.serialized == #"{"a":[1,[]],"f":false,"n":null,"o":{},"s":"a\"\\/\b\f\n\r\té😀","t":true}"#)
        #expect(try parse(value.serialized) == value)
    }

    @Test("a syntax error says where, and what most likely went wrong")
    func whereItWentWrong() {
        #expect(
            throws: StrictJSON.Problem.syntax(
                line: 2, column: 9, hint: "a comma before a closing bracket (trailing commas are not JSON)")
        ) {
            try StrictJSON.check(Array("{\"a\": 1,\n \"b\": 2,}".utf8), rules: .configuration)
        }
        #expect(throws: StrictJSON.Problem.syntax(line: 1, column: 1, hint: "comments are not JSON")) {
            try StrictJSON.check(Array("// x\n{}".utf8), rules: .configuration)
        }
        #expect(throws: StrictJSON.Problem.byteOrderMark) {
            try StrictJSON.check([0xEF, 0xBB, 0xBF] + Array("{}".utf8), rules: .configuration)
        }
    }
}
