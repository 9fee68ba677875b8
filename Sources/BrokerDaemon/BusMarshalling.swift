import BrokerCore
import DBus

/// The broker's values as D-Bus dictionaries: the one place, on the service's side of the
/// bus, where Swift types meet `a{sv}`. Key names come from BrokerAPI.
enum BusMarshalling {
    // The dictionaries are built with their entries in key order (the order the sorted
    // `vardict(_:)` gave, so the same bytes on the wire) without hashing: these run on every call.

    // Every string that holds text from outside, or may, is sent through `text(_:)`: the
    // outside-text rule, once more (the contract's own names are sent as they are). Text
    // from outside meets it where it enters (claims, provider texts, the state file), so this
    // changes nothing unless a boundary missed one; then a NUL becomes U+FFFD instead of making
    // libdbus refuse the whole message, which for `AccountChanged` would leave every app
    // unaware of a sign-out. A clean string costs one pass over its bytes, and no copy.

    static func text(_ value: String) -> DBusValue { .string(OutsideText.cleaned(value)) }

    static func texts(_ values: [String]) -> DBusValue { .strings(values.map(OutsideText.cleaned)) }

    /// An account as `a{sv}`; nobody is the empty dictionary.
    static func account(_ account: Account?) -> DBusValue {
        guard let account else { return .vardict([:]) }
        return .vardict(inOrder: [
            AccountKey.environment: text(account.environment),
            AccountKey.identifier: text(account.identifier),
            AccountKey.name: text(account.name),
            AccountKey.tenantId: text(account.tenantId),
            AccountKey.username: text(account.username),
        ])
    }

    static func accounts(_ accounts: [Account]) -> DBusValue {
        .array(elementSignature: "a{sv}", accounts.map { account($0) })
    }

    static func tokenResult(_ result: AppTokens) -> DBusValue {
        .vardict(inOrder: [
            TokenResultKey.accessToken: text(result.accessToken),
            TokenResultKey.account: account(result.account),
            TokenResultKey.authority: text(result.authority),
            TokenResultKey.authorizationHeader: text(result.authorizationHeader),
            TokenResultKey.correlationId: text(result.correlationId),
            TokenResultKey.expiresOn: .int64(result.expiresOn),
            TokenResultKey.idToken: text(result.idToken ?? ""),
            TokenResultKey.scopes: texts(result.scopes.values),
        ])
    }

    static func deviceInformation(_ info: DeviceInformation) -> DBusValue {
        var values: [String: DBusValue] = [
            DeviceInformationKey.authority: text(info.authority),
            DeviceInformationKey.brokerVersion: text(info.brokerVersion),
            DeviceInformationKey.deviceId: text(info.deviceId),
            DeviceInformationKey.deviceMode: .string(info.deviceMode.rawValue),
            DeviceInformationKey.extraDeviceInformation: .stringDict(
                Dictionary(
                    info.extraDeviceInformation.map { (OutsideText.cleaned($0.key), OutsideText.cleaned($0.value)) },
                    uniquingKeysWith: { first, _ in first })),
            DeviceInformationKey.tenantId: text(info.tenantId),
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

    static func accountChanged(_ change: DeviceAccountChange) -> (
        current: DBusValue, previous: DBusValue, reason: String
    ) {
        var previous = account(change.previous)
        if let cause = change.cause, case .dictionary(let keys, let values, var entries) = previous {
            entries.append(
                DBusDictEntry(key: .string(AccountKey.signOutCause), value: .variant(.string(cause.rawValue))))
            previous = .dictionary(keySignature: keys, valueSignature: values, entries)
        }
        return (account(change.current), previous, change.reason.rawValue)
    }

    /// `SignInProgress`'s arguments: the details carry the sign-in page's address and, when no
    /// browser opened, why.
    static func signInProgress(_ progress: SignInProgressReport) -> (flowId: String, stage: String, details: DBusValue)
    {
        (OutsideText.cleaned(progress.flowId), progress.stage.rawValue, .vardict(progress.details.mapValues(text)))
    }

    /// Refuses a call whose options (`a{sv}`) hold a key the contract does not list for its method
    /// (`io.shareddevice.Contract.Options`), or a listed key with a value of another type, as the
    /// configuration file refuses an unknown key: a misspelt `forcerefresh` ignored would leave the
    /// caller believing it was obeyed. Names the key and the ones the method knows; nothing changed.
    static func checkOptions(_ method: Broker1Method, _ arguments: [DBusValue]) throws(BrokerFailure) {
        guard let index = method.optionsArgument, arguments.indices.contains(index),
            let options = arguments[index].vardict
        else { return }
        let known = method.options
        // The first in order, so that the same call always gets the same message.
        for key in options.keys.sorted() {
            guard let signature = known.first(where: { $0.key == key })?.signature else {
                let names = known.map { "\($0.key) (\($0.signature))" }
                throw BrokerFailure(
                    .invalidArgument,
                    "\(method.rawValue) has no option \"\(OutsideText.escaped(key))\"; "
                        + (names.isEmpty
                            ? "it takes none: pass an empty dictionary"
                            : "its options are \(names.joined(separator: ", "))"))
            }
            if let value = options[key], value.signature != signature {
                throw BrokerFailure(
                    .invalidArgument,
                    "option \(key) of \(method.rawValue) must be of type \(signature), not \(value.signature)")
            }
        }
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
                "option prompt must be one of \(Prompt.allCases.map(\.rawValue).joined(separator: ", ")), not "
                    + OutsideText.escaped(text))
        }
        return prompt
    }

    static func signOutOutcome(_ outcome: SignOutOutcome) -> DBusValue {
        .vardict(inOrder: [
            SignOutResultKey.browserSessionEnded: .bool(outcome.browserSessionEnded),
            SignOutResultKey.cause: .string(outcome.cause.rawValue),
            SignOutResultKey.cleanedUp: texts(outcome.cleanedUp),
            SignOutResultKey.cleanedUpCount: .uint32(UInt32(clamping: outcome.cleanedUpCount)),
            SignOutResultKey.notCleanedUp: texts(outcome.notCleanedUp),
            SignOutResultKey.notCleanedUpCount: .uint32(UInt32(clamping: outcome.notCleanedUpCount)),
            SignOutResultKey.notes: texts(outcome.notes),
            SignOutResultKey.tokensRevoked: .bool(outcome.tokensRevoked),
        ])
    }

    static func challenge(_ challenge: Broker.SignInChallenge) -> DBusValue {
        .vardict(inOrder: [
            ChallengeKey.channel: text(challenge.channel),
            ChallengeKey.codeLength: .uint32(challenge.codeLength),
            ChallengeKey.sentTo: text(challenge.sentTo),
        ])
    }

    static func deviceChallenge(_ challenge: Broker.DeviceSignInChallenge) -> DBusValue {
        var values: [String: DBusValue] = [
            ChallengeKey.channel: .string(SignInFlow.deviceCode.rawValue),
            ChallengeKey.expiresIn: .int64(challenge.expiresIn),
            ChallengeKey.interval: .int64(challenge.interval),
            ChallengeKey.userCode: text(challenge.userCode),
            ChallengeKey.verificationUri: text(challenge.verificationUri),
        ]
        if let complete = challenge.verificationUriComplete {
            values[ChallengeKey.verificationUriComplete] = text(complete)
        }
        return .vardict(values)
    }

    static func error(_ failure: BrokerFailure) -> DBusError {
        // An error reply libdbus refused would leave the caller waiting for its timeout.
        DBusError(name: failure.code.dbusErrorName, message: OutsideText.cleaned(failure.message))
    }
}
