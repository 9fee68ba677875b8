import BrokerAPI
import Foundation
import Testing

@testable import BrokerctlCore
@testable import GraphProfile
@testable import SharedDeviceClient

/// brokerctl's JSON writer against Foundation's JSONEncoder, configured as brokerctl used it
/// (sorted keys, slashes as they are, indented or on one line): the same bytes for everything
/// brokerctl prints, and for the text an identity provider could put in it.
@Suite("brokerctl's JSON: JSONEncoder's bytes without Foundation")
struct JSONTextTests {
    static let alice = Account(
        username: "alice@contoso.example", identifier: "6003749b.contoso-demo", tenantId: "contoso-demo",
        environment: "127.0.0.1", name: "Alice Demo")
    /// What a provider could put in a name: quotes, backslashes, slashes, control characters, a
    /// bell, an escape sequence, a right-to-left override, a line separator, non-ASCII.
    static let hostile = "q\"u\\o/te\n\r\t\u{8}\u{c}\u{0}\u{7}\u{1b}[31m\u{1f}\u{7f}\u{202e}\u{2028}é😀"

    static func foundation<T: Encodable>(_ value: T, pretty: Bool) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting =
            pretty
            ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            : [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func expectSame<T: Encodable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
        for pretty in [true, false] {
            let ours = try JSONText.encode(value, pretty: pretty)
            let theirs = try foundation(value, pretty: pretty)
            #expect(ours == theirs, "pretty \(pretty)", sourceLocation: sourceLocation)
        }
    }

    @Test("device-info: with and without single sign-on, extra facts in key order")
    func deviceInformation() throws {
        for singleSignOn: [SingleSignOnMechanism]? in [nil, [], [.nativeSSO, .familyRefreshToken, .tokenExchange]] {
            try Self.expectSame(
                DeviceInformation(
                    deviceMode: .shared, brokerVersion: "0.2.0", deviceId: "0f8e1c2d", tenantId: "",
                    authority: "https://login.example/contoso/v2.0",
                    extraDeviceInformation: ["os": "Linux", "hostname": Self.hostile, "B": "1", "_": "2", "é": "3"],
                    singleSignOn: singleSignOn))
        }
        try Self.expectSame(
            DeviceInformation(
                deviceMode: .default, brokerVersion: "", deviceId: "", tenantId: "", authority: "",
                extraDeviceInformation: [:], singleSignOn: nil))
    }

    @Test("current-account and accounts: null accounts, empty and full lists")
    func accounts() throws {
        var hostile = Self.alice
        hostile.name = Self.hostile
        try Self.expectSame(CurrentAccountOutput(current: nil, previous: nil))
        try Self.expectSame(CurrentAccountOutput(current: Self.alice, previous: hostile))
        let none: [Account] = []
        try Self.expectSame(none)
        try Self.expectSame([Self.alice, hostile])
    }

    @Test("what the other commands print: tokens, sign-out results, numbers at their limits")
    func otherCommands() throws {
        try Self.expectSame(
            TokenResult(
                accessToken: "opaque", expiresOn: UnixTime(seconds: 1_795_710_590), idToken: nil,
                scopes: ["User.Read", "openid"], account: Self.alice, authority: "https://login.example/x",
                correlationId: "c0ffee", authorizationHeader: "Bearer opaque"))
        try Self.expectSame(
            SignOutResult(
                tokensRevoked: false, browserSessionEnded: true, notes: [Self.hostile], cause: .idle,
                cleanedUp: [], notCleanedUp: ["/home/kiosk/.cache"]))
        try Self.expectSame([Int64.min, Int64.max, 0])
        try Self.expectSame([UInt64.max])
        try Self.expectSame([[String: [String]]](arrayLiteral: ["a": [], "b": ["x"]], [:]))
        try Self.expectSame(["only": Optional<String>.none])
    }

    @Test("watch, sign-out, sign-in options and Graph's profile: every other value brokerctl prints")
    func commandsOutput() throws {
        try Self.expectSame(
            SignOutOutput(
                signedOut: true,
                result: SignOutResult(
                    tokensRevoked: true, browserSessionEnded: false, notes: [], cause: .app, cleanedUp: [],
                    notCleanedUp: [])))
        try Self.expectSame(WarningLine(.pending(reason: .idle, deadline: 1_795_710_590_000_000)))
        try Self.expectSame(WarningLine(.cancelled(reason: .lock)))
        try Self.expectSame(BrokerEventLine(event: "broker-left"))
        try Self.expectSame(WatchLine(reason: "signed-in", current: Self.alice, previous: nil, cause: nil))
        try Self.expectSame(WatchLine(reason: "signed-out", current: nil, previous: Self.alice, cause: "provider"))
        try Self.expectSame(SignInOptions(flows: [.password, .emailCode], singleSignOn: [.nativeSSO]))
        try Self.expectSame(SignInOptions(flows: [], singleSignOn: []))
        var profile = GraphProfile()
        try Self.expectSame(profile)
        profile.displayName = Self.hostile
        profile.mail = "alice@contoso.example"
        try Self.expectSame(profile)
    }

    /// A value whose conformance writes nothing, and one that asks for a container twice.
    struct Silent: Encodable { func encode(to encoder: any Encoder) throws {} }
    struct TwoVisits: Encodable {
        enum Key: String, CodingKey { case list, object, value }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            var first = container.nestedUnkeyedContainer(forKey: .list)
            try first.encode("a")
            var again = container.nestedUnkeyedContainer(forKey: .list)
            try again.encode("b")
            var object = container.nestedContainer(keyedBy: Key.self, forKey: .object)
            try object.encode(1, forKey: .value)
            var objectAgain = container.nestedContainer(keyedBy: Key.self, forKey: .object)
            try objectAgain.encode(2, forKey: .list)
            try container.encode(Silent(), forKey: .value)
        }
    }

    @Test("what an unusual conformance does: nothing written, a container asked for twice")
    func unusualConformances() throws {
        try Self.expectSame(TwoVisits())
        try Self.expectSame([Silent()])
        #expect(throws: JSONText.Unsupported.self) { try JSONText.encode(Silent(), pretty: true) }
        #expect(throws: (any Error).self) { try Self.foundation(Silent(), pretty: true) }
    }

    @Test("a floating-point number is refused, not written differently from JSONEncoder")
    func floatingPoint() {
        #expect(throws: JSONText.Unsupported.self) { try JSONText.encode([1.5], pretty: false) }
    }
}
