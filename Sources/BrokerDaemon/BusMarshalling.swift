import BrokerCore
import DBus

/// The broker's values as D-Bus dictionaries: the one place, on the service's side of the
/// bus, where Swift types meet `a{sv}`. Key names come from BrokerAPI.
enum BusMarshalling {
    // The dictionaries are built with their entries in key order (the order the sorted
    // `vardict(_:)` gave, so the same bytes on the wire) without hashing: these run on every call.

    /// An account as `a{sv}`; nobody is the empty dictionary.
    static func account(_ account: Account?) -> DBusValue {
        guard let account else { return .vardict([:]) }
        return .vardict(inOrder: [
            AccountKey.environment: .string(account.environment),
            AccountKey.identifier: .string(account.identifier),
            AccountKey.name: .string(account.name),
            AccountKey.tenantId: .string(account.tenantId),
            AccountKey.username: .string(account.username),
        ])
    }

    static func accounts(_ accounts: [Account]) -> DBusValue {
        .array(elementSignature: "a{sv}", accounts.map { account($0) })
    }

    static func tokenResult(_ result: AppTokens) -> DBusValue {
        .vardict(inOrder: [
            TokenResultKey.accessToken: .string(result.accessToken),
            TokenResultKey.account: account(result.account),
            TokenResultKey.authority: .string(result.authority),
            TokenResultKey.authorizationHeader: .string(result.authorizationHeader),
            TokenResultKey.correlationId: .string(result.correlationId),
            TokenResultKey.expiresOn: .int64(result.expiresOn),
            TokenResultKey.idToken: .string(result.idToken ?? ""),
            TokenResultKey.scopes: .strings(result.scopes.values),
        ])
    }

    static func deviceInformation(_ info: DeviceInformation) -> DBusValue {
        var values: [String: DBusValue] = [
            DeviceInformationKey.authority: .string(info.authority),
            DeviceInformationKey.brokerVersion: .string(info.brokerVersion),
            DeviceInformationKey.deviceId: .string(info.deviceId),
            DeviceInformationKey.deviceMode: .string(info.deviceMode.rawValue),
            DeviceInformationKey.extraDeviceInformation: .stringDict(info.extraDeviceInformation),
            DeviceInformationKey.tenantId: .string(info.tenantId),
        ]
        // Absent while the provider has not been reached: unknown is not "none".
        if let singleSignOn = info.singleSignOn {
            values[DeviceInformationKey.singleSignOn] = .strings(singleSignOn.map(\.rawValue))
        }
        return .vardict(values)
    }

    static func signInOptions(_ options: Broker.SignInOptions) -> DBusValue {
        .vardict([
            SignInOptionsKey.flows: .strings(options.flows.map(\.rawValue)),
            SignInOptionsKey.singleSignOn: .strings(options.singleSignOn.map(\.rawValue)),
        ])
    }

    static func accountChanged(_ change: DeviceAccountChange) -> [DBusValue] {
        var previous = account(change.previous)
        if let cause = change.cause, case .dictionary(let keys, let values, var entries) = previous {
            entries.append(
                DBusDictEntry(key: .string(AccountKey.signOutCause), value: .variant(.string(cause.rawValue))))
            previous = .dictionary(keySignature: keys, valueSignature: values, entries)
        }
        return [account(change.current), previous, .string(change.reason.rawValue)]
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
            throw BrokerFailure(
                .invalidArgument,
                "option prompt must be one of \(Prompt.allCases.map(\.rawValue).joined(separator: ", ")), not \(text)")
        }
        return prompt
    }

    static func signOutOutcome(_ outcome: SignOutOutcome) -> DBusValue {
        .vardict(inOrder: [
            SignOutResultKey.browserSessionEnded: .bool(outcome.browserSessionEnded),
            SignOutResultKey.cause: .string(outcome.cause.rawValue),
            SignOutResultKey.cleanedUp: .strings(outcome.cleanedUp),
            SignOutResultKey.notCleanedUp: .strings(outcome.notCleanedUp),
            SignOutResultKey.notes: .strings(outcome.notes),
            SignOutResultKey.tokensRevoked: .bool(outcome.tokensRevoked),
        ])
    }

    static func challenge(_ challenge: Broker.SignInChallenge) -> DBusValue {
        .vardict(inOrder: [
            ChallengeKey.channel: .string(challenge.channel),
            ChallengeKey.codeLength: .uint32(challenge.codeLength),
            ChallengeKey.sentTo: .string(challenge.sentTo),
        ])
    }

    static func deviceChallenge(_ challenge: Broker.DeviceSignInChallenge) -> DBusValue {
        var values: [String: DBusValue] = [
            ChallengeKey.channel: .string(SignInMethod.deviceCode.rawValue),
            ChallengeKey.expiresIn: .int64(challenge.expiresIn),
            ChallengeKey.interval: .int64(challenge.interval),
            ChallengeKey.userCode: .string(challenge.userCode),
            ChallengeKey.verificationUri: .string(challenge.verificationUri),
        ]
        if let complete = challenge.verificationUriComplete {
            values[ChallengeKey.verificationUriComplete] = .string(complete)
        }
        return .vardict(values)
    }

    static func error(_ failure: BrokerFailure) -> DBusError {
        DBusError(name: failure.code.dbusErrorName, message: failure.message)
    }
}
