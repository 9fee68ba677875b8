@testable import DBus
import Testing

/// The signature checks answer common shapes without libdbus; they must agree with it everywhere.
@Suite("Signatures")
struct SignatureTests {
    @Test("the shortcut for common shapes agrees with libdbus",
          arguments: ["", "s", "v", "ss", "as", "a{sv}", "a{sv}a{sv}", "a{ss}", "a{vs}", "a{sv", "{sv}", "aa", "a",
                      "(s)", "a(sv)", "aas", "a{s(i)}", "x", "h", "z", "a{", "a{s}", "s\u{0}s", String(repeating: "s", count: 255),
                      String(repeating: "s", count: 256), String(repeating: "a{sv}", count: 51), "a{sv}s" + String(repeating: "s", count: 250)])
    func agreesWithLibdbus(signature: String) {
        #expect(DBusSignature.isValid(signature) == DBusSignature.libdbusAccepts(signature), "\(signature.debugDescription)")
        #expect(DBusSignature.isSingleCompleteType(signature) == DBusSignature.libdbusAcceptsSingle(signature), "\(signature.debugDescription)")
    }

    @Test("the shortcut agrees with libdbus on 20,000 random short signatures")
    func agreesOnRandomSignatures() {
        var generator = SplitMix64(seed: 7)
        let alphabet = Array("sviyxa{}()ag".utf8)
        var shortcutsTaken = 0
        for _ in 0..<20_000 {
            let length = Int(generator.next() % 8)
            let bytes = (0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] }
            let signature = String(decoding: bytes, as: UTF8.self)
            if DBusSignature.simpleTypeCount(signature) != nil { shortcutsTaken += 1 }
            guard DBusSignature.isValid(signature) == DBusSignature.libdbusAccepts(signature),
                  DBusSignature.isSingleCompleteType(signature) == DBusSignature.libdbusAcceptsSingle(signature) else {
                Issue.record("disagreement on \(signature.debugDescription)")
                return
            }
        }
        #expect(shortcutsTaken > 1_000, "the shortcut should cover the simple shapes")
    }
}

/// A small seeded generator, so that a failure can be replayed.
private struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
