import BrokerAPI
import DBus
import Testing

@testable import SharedDeviceClient

/// The client library's reading of the broker's replies and errors, without a bus: what an app
/// gets from each dictionary, and a clear error (never a crash) for one that breaks the contract.
@Suite("Client library: the generated readers of replies, signals and errors, without a bus")
struct ReplyDecodingTests {
    static let alice: DBusValue = .vardict([
        AccountKey.username: .string("alice@contoso.example"), AccountKey.identifier: .string("oid-a.t"),
        AccountKey.tenantId: .string("t"), AccountKey.environment: .string("login.example"),
        AccountKey.name: .string("Alice"),
    ])

    @Test func accountsEmptyAndWhole() throws {
        #expect(try Account.orNobody(.vardict([:])) == nil)
        let account = try #require(try Account.orNobody(Self.alice))
        #expect(
            account.username == "alice@contoso.example" && account.identifier == "oid-a.t" && account.name == "Alice")
        #expect(throws: BrokerError.self) { try Account.orNobody(.vardict([AccountKey.name: .string("no id")])) }
        #expect(throws: BrokerError.self) { try Account.orNobody(.string("not a dictionary")) }
    }

    @Test func deviceInformationWithAndWithoutSingleSignOn() throws {
        var fields: [String: DBusValue] = [
            DeviceInformationKey.deviceMode: .string("shared"), DeviceInformationKey.brokerVersion: .string("1"),
            DeviceInformationKey.deviceId: .string("d"), DeviceInformationKey.tenantId: .string(""),
            DeviceInformationKey.authority: .string("https://login.example/t/v2.0"),
            DeviceInformationKey.extraDeviceInformation: .stringDict(["os": "Linux"]),
        ]
        #expect(try DeviceInformation(bus: .vardict(fields)).singleSignOn == nil)
        fields[DeviceInformationKey.singleSignOn] = .strings([])
        #expect(try DeviceInformation(bus: .vardict(fields)).singleSignOn == [])
        // A mechanism a newer broker names is left out, not an error.
        fields[DeviceInformationKey.singleSignOn] = .strings(["native-sso", "quantum-sso", "token-exchange"])
        let information = try DeviceInformation(bus: .vardict(fields))
        #expect(information.singleSignOn == [.nativeSSO, .tokenExchange])
        #expect(information.deviceMode == .shared && information.extraDeviceInformation == ["os": "Linux"])
        fields[DeviceInformationKey.deviceMode] = .string("kiosk")
        #expect(throws: BrokerError.self) { try DeviceInformation(bus: .vardict(fields)) }
    }

    @Test func tokenResults() throws {
        var fields: [String: DBusValue] = [
            TokenResultKey.accessToken: .string("at"), TokenResultKey.expiresOn: .int64(1_800_000_000),
            TokenResultKey.idToken: .string(""), TokenResultKey.scopes: .strings(["openid", "User.Read"]),
            TokenResultKey.account: Self.alice, TokenResultKey.authority: .string("https://login.example/t/v2.0"),
            TokenResultKey.correlationId: .string("c"),
        ]
        let result = try TokenResult(bus: .vardict(fields))
        #expect(result.idToken == nil)
        #expect(result.authorizationHeader == "Bearer at")
        #expect(result.account.username == "alice@contoso.example")
        fields[TokenResultKey.expiresOn] = .string("soon")
        #expect(throws: BrokerError.self) { try TokenResult(bus: .vardict(fields)) }
    }

    @Test("a sign-out's clean-up: counts as sent, or from the paths when an older broker sends none")
    func signOutCleanUpCounts() throws {
        var fields: [String: DBusValue] = [
            SignOutResultKey.cleanedUp: .strings(["/home/kiosk/Downloads/a", "/home/kiosk/Downloads/b"]),
            SignOutResultKey.notCleanedUp: .strings(["/home/kiosk/linked (a symbolic link: not followed)"]),
        ]
        let older = try SignOutResult(bus: .vardict(fields))
        #expect(older.cleanedUpCount == 2 && older.notCleanedUpCount == 1)
        fields[SignOutResultKey.cleanedUpCount] = .uint32(20_000)
        fields[SignOutResultKey.notCleanedUpCount] = .uint32(3)
        let bounded = try SignOutResult(bus: .vardict(fields))
        #expect(bounded.cleanedUpCount == 20_000 && bounded.cleanedUp.count == 2 && bounded.notCleanedUpCount == 3)
    }

    @Test("AccountChanged: the departed account and its cause; a signal of another shape is refused")
    func accountChangedSignal() throws {
        var previous = try #require(Self.alice.vardict)
        previous[AccountKey.signOutCause] = .string("idle")
        let signal = DBusSignal(
            sender: ":1.7", path: BrokerNames.objectPath, interface: BrokerNames.interface,
            member: Broker1Signal.accountChanged.rawValue,
            arguments: [.vardict([:]), .vardict(previous), .string("signed-out")])
        let change = AccountChange(try Broker1Signals.AccountChanged(signal))
        #expect(change.current == nil && change.previous?.username == "alice@contoso.example")
        #expect(change.reason == .signedOut && change.cause == .idle)
        var wrong = signal
        wrong.arguments = [.string("alice"), .vardict([:]), .string("signed-in")]
        #expect(throws: BrokerError.self) { try Broker1Signals.AccountChanged(wrong) }
        wrong = signal
        wrong.member = Broker1Signal.signOutPending.rawValue
        #expect(throws: BrokerError.self) { try Broker1Signals.AccountChanged(wrong) }
    }

    @Test("StartSignIn's challenge: the case its channel names, email-code for any other channel")
    func challengeChoice() throws {
        let device = try SignInChallenge(
            bus: .vardict([
                ChallengeKey.channel: .string("device-code"), ChallengeKey.verificationUri: .string("https://x/d"),
                ChallengeKey.userCode: .string("ABCD-EFGH"), ChallengeKey.expiresIn: .int64(600),
                ChallengeKey.interval: .int64(5),
            ]))
        guard case .deviceCodeChallenge(let shown) = device else {
            Issue.record("read as \(device)")
            return
        }
        #expect(shown.userCode == "ABCD-EFGH" && shown.verificationUriComplete == nil && shown.expiresIn == 600)
        let sms = try SignInChallenge(
            bus: .vardict([
                ChallengeKey.channel: .string("sms"), ChallengeKey.sentTo: .string("+1***99"),
                ChallengeKey.codeLength: .uint32(6),
            ]))
        #expect(sms == .codeChallenge(CodeChallenge(channel: "sms", sentTo: "+1***99", codeLength: 6)))
        #expect(throws: BrokerError.self) {
            try SignInChallenge(bus: .vardict([ChallengeKey.channel: .string("device-code")]))
        }
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
