import BrokerAPI
import DBus
import Testing

@testable import SharedDeviceClient

/// The client library's reading of the broker's replies and errors, without a bus: what an app
/// gets from each dictionary, and a clear error (never a crash) for one that breaks the contract.
@Suite("Client library: replies and errors read without a bus")
struct ReplyDecodingTests {
    static let alice: DBusValue = .vardict([
        AccountKey.username: .string("alice@contoso.example"), AccountKey.identifier: .string("oid-a.t"),
        AccountKey.tenantId: .string("t"), AccountKey.environment: .string("login.example"),
        AccountKey.name: .string("Alice"),
    ])

    @Test func accountsEmptyAndWhole() throws {
        #expect(try ReplyDecoding.account(.vardict([:])) == nil)
        let account = try #require(try ReplyDecoding.account(Self.alice))
        #expect(
            account.username == "alice@contoso.example" && account.identifier == "oid-a.t" && account.name == "Alice")
        #expect(throws: BrokerError.self) { try ReplyDecoding.account(.vardict([AccountKey.name: .string("no id")])) }
        #expect(throws: BrokerError.self) { try ReplyDecoding.account(.string("not a dictionary")) }
    }

    @Test func deviceInformationWithAndWithoutSingleSignOn() throws {
        var fields: [String: DBusValue] = [
            DeviceInformationKey.deviceMode: .string("shared"), DeviceInformationKey.brokerVersion: .string("1"),
            DeviceInformationKey.deviceId: .string("d"), DeviceInformationKey.tenantId: .string(""),
            DeviceInformationKey.authority: .string("https://login.example/t/v2.0"),
            DeviceInformationKey.extraDeviceInformation: .stringDict(["os": "Linux"]),
        ]
        #expect(try ReplyDecoding.deviceInformation(.vardict(fields)).singleSignOn == nil)
        fields[DeviceInformationKey.singleSignOn] = .strings([])
        #expect(try ReplyDecoding.deviceInformation(.vardict(fields)).singleSignOn == [])
        // A mechanism a newer broker names is left out, not an error.
        fields[DeviceInformationKey.singleSignOn] = .strings(["native-sso", "quantum-sso", "token-exchange"])
        let information = try ReplyDecoding.deviceInformation(.vardict(fields))
        #expect(information.singleSignOn == [.nativeSSO, .tokenExchange])
        #expect(information.deviceMode == .shared && information.extraDeviceInformation == ["os": "Linux"])
        fields[DeviceInformationKey.deviceMode] = .string("kiosk")
        #expect(throws: BrokerError.self) { try ReplyDecoding.deviceInformation(.vardict(fields)) }
    }

    @Test func tokenResults() throws {
        var fields: [String: DBusValue] = [
            TokenResultKey.accessToken: .string("at"), TokenResultKey.expiresOn: .int64(1_800_000_000),
            TokenResultKey.idToken: .string(""), TokenResultKey.scopes: .strings(["openid", "User.Read"]),
            TokenResultKey.account: Self.alice, TokenResultKey.authority: .string("https://login.example/t/v2.0"),
            TokenResultKey.correlationId: .string("c"),
        ]
        let result = try ReplyDecoding.tokenResult(.vardict(fields))
        #expect(result.idToken == nil)
        #expect(result.authorizationHeader == "Bearer at")
        #expect(result.account.username == "alice@contoso.example")
        fields[TokenResultKey.expiresOn] = .string("soon")
        #expect(throws: BrokerError.self) { try ReplyDecoding.tokenResult(.vardict(fields)) }
    }

    @Test("a sign-out's clean-up: counts as sent, or from the paths when an older broker sends none")
    func signOutCleanUpCounts() {
        var fields: [String: DBusValue] = [
            SignOutResultKey.cleanedUp: .strings(["/home/kiosk/Downloads/a", "/home/kiosk/Downloads/b"]),
            SignOutResultKey.notCleanedUp: .strings(["/home/kiosk/linked (a symbolic link: not followed)"]),
        ]
        let older = ReplyDecoding.signOutResult(.vardict(fields))
        #expect(older.cleanedUpCount == 2 && older.notCleanedUpCount == 1)
        fields[SignOutResultKey.cleanedUpCount] = .uint32(20_000)
        fields[SignOutResultKey.notCleanedUpCount] = .uint32(3)
        let bounded = ReplyDecoding.signOutResult(.vardict(fields))
        #expect(bounded.cleanedUpCount == 20_000 && bounded.cleanedUp.count == 2 && bounded.notCleanedUpCount == 3)
    }

    @Test func everyBrokerErrorNameBecomesItsCase() {
        for code in BrokerErrorCode.allCases {
            let error = BrokerError(DBusError(name: BrokerNames.errorPrefix + code.rawValue, message: "why"))
            #expect(error.errorName == BrokerNames.errorPrefix + code.rawValue, "\(code)")
            #expect(error.message == "why")
        }
        // A bus that got no answer: the app is told the broker timed out, not a broker error.
        let late = BrokerError(DBusError(name: "org.freedesktop.DBus.Error.NoReply", message: "late"))
        guard case .timedOut = late else {
            Issue.record("NoReply read as \(late)")
            return
        }
        #expect(
            BrokerError(DBusError(name: "org.example.Odd", message: "odd"))
                == .dbus(name: "org.example.Odd", message: "odd"))
    }
}
