import Testing

@testable import DBus

/// The signature checks answer common shapes without libdbus; they must agree with it everywhere.
@Suite("Signatures")
struct SignatureTests {
    @Test(
        "the shortcut for common shapes agrees with libdbus",
        arguments: [
            "", "s", "v", "ss", "as", "a{sv}", "a{sv}a{sv}", "a{ss}", "a{vs}", "a{sv", "{sv}", "aa", "a",
            "(s)", "a(sv)", "aas", "a{s(i)}", "x", "h", "z", "a{", "a{s}", "s\u{0}s",
            String(repeating: "s", count: 255),
            String(repeating: "s", count: 256), String(repeating: "a{sv}", count: 51),
            "a{sv}s" + String(repeating: "s", count: 250),
        ])
    func agreesWithLibdbus(signature: String) {
        #expect(
            DBusSignature.isValid(signature) == DBusSignature.libdbusAccepts(signature), "\(signature.debugDescription)"
        )
        #expect(
            DBusSignature.isSingleCompleteType(signature) == DBusSignature.libdbusAcceptsSingle(signature),
            "\(signature.debugDescription)")
    }

    @Test("the shortcut agrees with libdbus on every signature of up to 4 characters from s v i y x a { } ( ) g")
    func agreesOnEveryShortSignature() {
        let alphabet = Array("svixya{}()g".utf8)
        var signatures: [[UInt8]] = [[]]
        var frontier: [[UInt8]] = [[]]
        for _ in 1...4 {
            frontier = frontier.flatMap { prefix in alphabet.map { prefix + [$0] } }
            signatures += frontier
        }
        var shortcutsTaken = 0
        for bytes in signatures {
            let signature = String(decoding: bytes, as: UTF8.self)
            if DBusSignature.simpleTypeCount(signature) != nil { shortcutsTaken += 1 }
            guard DBusSignature.isValid(signature) == DBusSignature.libdbusAccepts(signature),
                DBusSignature.isSingleCompleteType(signature) == DBusSignature.libdbusAcceptsSingle(signature)
            else {
                Issue.record("disagreement on \(signature.debugDescription)")
                return
            }
        }
        #expect(signatures.count == 16_105)
        #expect(shortcutsTaken > 1_000, "the shortcut should cover the simple shapes")
    }

    @Test("a list of values has its values' signatures one after the other")
    func signatureOfValues() {
        #expect(DBusSignature.of([]) == "")
        #expect(DBusSignature.of([.string("a")]) == "s")
        let account = DBusValue.dictionary(keySignature: "s", valueSignature: "v", [])
        #expect(DBusSignature.of([account, account, .string("signed-out")]) == "a{sv}a{sv}s")
        #expect(DBusValue.structure([.int32(1), .array(elementSignature: "s", [])]).signature == "(ias)")
    }

    @Test("a method's signatures follow its arguments when they change")
    func methodSignaturesFollowArguments() {
        typealias Interface = DBusInterfaceDescription
        var method = Interface.Method(
            name: "SignOut", inArguments: [.init("clientId", "s"), .init("accountId", "s")],
            outArguments: [.init("result", "a{sv}")])
        #expect(method.inSignature == "ss" && method.outSignature == "a{sv}")
        method.inArguments.append(.init("options", "a{sv}"))
        method.outArguments[0].signature = "b"
        #expect(method.inSignature == "ssa{sv}" && method.outSignature == "b")
        #expect(Interface.Method(name: "Ping").inSignature == "")
    }
}
