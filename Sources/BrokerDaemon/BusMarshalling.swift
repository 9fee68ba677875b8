import BrokerCore
import DBus

/// The broker's values as D-Bus dictionaries: the one place, on the service's side of the
/// bus, where Swift types meet `a{sv}`. Key names come from BrokerAPI.
enum BusMarshalling {
    /// An account as `a{sv}`; nobody is the empty dictionary.
    static func account(_ account: Account?) -> DBusValue {
        guard let account else { return .vardict([:]) }
        return .vardict([
            AccountKey.username: .string(account.username),
            AccountKey.identifier: .string(account.identifier),
            AccountKey.tenantId: .string(account.tenantId),
            AccountKey.environment: .string(account.environment),
            AccountKey.name: .string(account.name),
        ])
    }

    static func accounts(_ accounts: [Account]) -> DBusValue {
        .vardictArray(accounts.map { account($0).vardict ?? [:] })
    }

    static func tokenResult(_ result: TokenResult) -> DBusValue {
        .vardict([
            TokenResultKey.accessToken: .string(result.accessToken),
            TokenResultKey.expiresOn: .int64(result.expiresOn),
            TokenResultKey.idToken: .string(result.idToken ?? ""),
            TokenResultKey.scopes: .strings(result.scopes.values),
            TokenResultKey.account: account(result.account),
            TokenResultKey.authority: .string(result.authority),
            TokenResultKey.correlationId: .string(result.correlationId),
            TokenResultKey.authorizationHeader: .string(result.authorizationHeader),
        ])
    }

    static func deviceInformation(_ info: DeviceInformation) -> DBusValue {
        .vardict([
            DeviceInformationKey.deviceMode: .string(info.deviceMode.rawValue),
            DeviceInformationKey.brokerVersion: .string(info.brokerVersion),
            DeviceInformationKey.deviceId: .string(info.deviceId),
            DeviceInformationKey.tenantId: .string(info.tenantId),
            DeviceInformationKey.authority: .string(info.authority),
            DeviceInformationKey.extraDeviceInformation: .stringDict(info.extraDeviceInformation),
        ])
    }

    static func accountChanged(_ change: AccountChange) -> [DBusValue] {
        [account(change.current), account(change.previous), .string(change.reason.rawValue)]
    }

    /// A boolean option: absent is false, any other type is the caller's mistake.
    static func boolOption(_ options: [String: DBusValue], _ key: String) throws(BrokerFailure) -> Bool {
        guard let value = options[key] else { return false }
        guard let flag = value.bool else {
            throw BrokerFailure(.invalidArgument, "option \(key) must be a boolean (b), not \(value.signature)")
        }
        return flag
    }

    /// A string option: absent is nil, any other type is the caller's mistake.
    static func stringOption(_ options: [String: DBusValue], _ key: String) throws(BrokerFailure) -> String? {
        guard let value = options[key] else { return nil }
        guard let text = value.string else {
            throw BrokerFailure(.invalidArgument, "option \(key) must be a string (s), not \(value.signature)")
        }
        return text
    }

    static func promptOption(_ options: [String: DBusValue]) throws(BrokerFailure) -> Prompt? {
        guard let text = try stringOption(options, OptionKey.prompt), !text.isEmpty else { return nil }
        guard let prompt = Prompt(rawValue: text) else {
            throw BrokerFailure(.invalidArgument,
                "option prompt must be one of \(Prompt.allCases.map(\.rawValue).joined(separator: ", ")), not \(text)")
        }
        return prompt
    }

    static func signOutOutcome(_ outcome: SignOutOutcome) -> DBusValue {
        .vardict([
            SignOutResultKey.tokensRevoked: .bool(outcome.tokensRevoked),
            SignOutResultKey.browserSessionEnded: .bool(outcome.browserSessionEnded),
            SignOutResultKey.notes: .strings(outcome.notes),
        ])
    }

    static func challenge(_ challenge: Broker.SignInChallenge) -> DBusValue {
        .vardict([
            ChallengeKey.channel: .string(challenge.channel),
            ChallengeKey.sentTo: .string(challenge.sentTo),
            ChallengeKey.codeLength: .uint32(challenge.codeLength),
        ])
    }

    static func error(_ failure: BrokerFailure) -> DBusError {
        DBusError(name: failure.code.dbusErrorName, message: failure.message)
    }
}
