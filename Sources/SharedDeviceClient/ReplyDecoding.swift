import BrokerAPI
import DBus

/// The broker's dictionaries as Swift values: the one place, on the apps' side of the bus,
/// where `a{sv}` meets the library's types. Key names come from BrokerAPI.
enum ReplyDecoding {
    static func account(_ value: DBusValue?) throws(BrokerError) -> Account? {
        guard let dict = value?.vardict else { throw malformed("an account is not a{sv}") }
        if dict.isEmpty { return nil }
        guard let username = dict[AccountKey.username]?.string, let identifier = dict[AccountKey.identifier]?.string
        else {
            throw malformed("an account has no username or identifier")
        }
        return Account(
            username: username, identifier: identifier,
            tenantId: dict[AccountKey.tenantId]?.string ?? "",
            environment: dict[AccountKey.environment]?.string ?? "",
            name: dict[AccountKey.name]?.string ?? "")
    }

    /// A reply without a result (a broker older than the result) reads as "nothing to report".
    static func signOutResult(_ value: DBusValue?) -> SignOutResult {
        let dict = value?.vardict ?? [:]
        let cleanedUp = dict[SignOutResultKey.cleanedUp]?.stringArray ?? []
        let notCleanedUp = dict[SignOutResultKey.notCleanedUp]?.stringArray ?? []
        return SignOutResult(
            tokensRevoked: dict[SignOutResultKey.tokensRevoked]?.bool ?? true,
            browserSessionEnded: dict[SignOutResultKey.browserSessionEnded]?.bool ?? false,
            notes: dict[SignOutResultKey.notes]?.stringArray ?? [],
            cause: dict[SignOutResultKey.cause]?.string.flatMap(SignOutCause.init(rawValue:)) ?? .app,
            cleanedUp: cleanedUp, notCleanedUp: notCleanedUp,
            // A broker without the counts sent every path.
            cleanedUpCount: dict[SignOutResultKey.cleanedUpCount]?.uint32.map(Int.init) ?? cleanedUp.count,
            notCleanedUpCount: dict[SignOutResultKey.notCleanedUpCount]?.uint32.map(Int.init) ?? notCleanedUp.count)
    }

    static func tokenResult(_ value: DBusValue?) throws(BrokerError) -> TokenResult {
        guard let dict = value?.vardict, let accessToken = dict[TokenResultKey.accessToken]?.string,
            let expiresOn = dict[TokenResultKey.expiresOn]?.int64,
            let account = try account(dict[TokenResultKey.account])
        else { throw malformed("a token result lacks accessToken, expiresOn or account") }
        let idToken = dict[TokenResultKey.idToken]?.string ?? ""
        return TokenResult(
            accessToken: accessToken, expiresOn: UnixTime(seconds: expiresOn), idToken: idToken.isEmpty ? nil : idToken,
            scopes: dict[TokenResultKey.scopes]?.stringArray ?? [], account: account,
            authority: dict[TokenResultKey.authority]?.string ?? "",
            correlationId: dict[TokenResultKey.correlationId]?.string ?? "",
            authorizationHeader: dict[TokenResultKey.authorizationHeader]?.string ?? "Bearer \(accessToken)")
    }

    static func deviceInformation(_ value: DBusValue?) throws(BrokerError) -> DeviceInformation {
        guard let dict = value?.vardict,
            let mode = dict[DeviceInformationKey.deviceMode]?.string.flatMap(DeviceMode.init(rawValue:))
        else { throw malformed("the device information lacks a known deviceMode") }
        return DeviceInformation(
            deviceMode: mode, brokerVersion: dict[DeviceInformationKey.brokerVersion]?.string ?? "",
            deviceId: dict[DeviceInformationKey.deviceId]?.string ?? "",
            tenantId: dict[DeviceInformationKey.tenantId]?.string ?? "",
            authority: dict[DeviceInformationKey.authority]?.string ?? "",
            extraDeviceInformation: dict[DeviceInformationKey.extraDeviceInformation]?.stringDict ?? [:],
            // A mechanism a newer broker names and this library does not know is left out.
            singleSignOn: dict[DeviceInformationKey.singleSignOn]?.stringArray?.compactMap(
                SingleSignOnMechanism.init(rawValue:)))
    }

    static func signInOptions(_ value: DBusValue?) throws(BrokerError) -> SignInOptions {
        guard let dict = value?.vardict, let flows = dict[SignInOptionsKey.flows]?.stringArray else {
            throw malformed("the sign-in options lack their flows")
        }
        // A flow or mechanism a newer broker names and this library does not know is left out.
        return SignInOptions(
            flows: flows.compactMap(SignInFlow.init(rawValue:)),
            singleSignOn: dict[SignInOptionsKey.singleSignOn]?.stringArray?.compactMap(
                SingleSignOnMechanism.init(rawValue:)) ?? [])
    }

    static func accountChange(_ arguments: [DBusValue]) throws(BrokerError) -> AccountChange {
        guard arguments.count == 3, let reasonText = arguments[2].string else {
            throw malformed("AccountChanged does not carry (a{sv}, a{sv}, s)")
        }
        let current = try account(arguments[0])
        let reason = AccountChange.Reason(rawValue: reasonText) ?? (current == nil ? .signedOut : .signedIn)
        let cause = arguments[1].vardict?[AccountKey.signOutCause]?.string.flatMap(SignOutCause.init(rawValue:))
        return AccountChange(current: current, previous: try account(arguments[1]), reason: reason, cause: cause)
    }

    static func challenge(_ value: DBusValue?) throws(BrokerError) -> CodeChallenge {
        guard let dict = value?.vardict, let sentTo = dict[ChallengeKey.sentTo]?.string else {
            throw malformed("a code challenge lacks sentTo")
        }
        let length =
            dict[ChallengeKey.codeLength]?.uint32 ?? dict[ChallengeKey.codeLength]?.int32.map { UInt32(clamping: $0) }
            ?? 0
        return CodeChallenge(
            channel: dict[ChallengeKey.channel]?.string ?? "email", sentTo: sentTo, codeLength: Int(length))
    }

    /// `StartSignIn`'s `(s flowId, a{sv} challenge)`.
    static func startedSignIn(_ reply: [DBusValue]) throws(BrokerError) -> (flowId: String, challenge: DBusValue) {
        guard reply.count == 2, let flowId = reply[0].string, reply[1].vardict != nil else {
            throw malformed("\(Broker1Method.startSignIn.rawValue) did not return (flowId, challenge)")
        }
        return (flowId, reply[1])
    }

    /// What a device-code challenge tells the person.
    struct DeviceCodeChallenge: Sendable {
        var verificationUri: String
        var verificationUriComplete: String?
        var userCode: String
        var expiresIn: Int64
    }

    static func deviceCodeChallenge(_ value: DBusValue) throws(BrokerError) -> DeviceCodeChallenge {
        guard let dict = value.vardict, let uri = dict[ChallengeKey.verificationUri]?.string,
            let code = dict[ChallengeKey.userCode]?.string
        else { throw malformed("a device-code challenge lacks verificationUri or userCode") }
        return DeviceCodeChallenge(
            verificationUri: uri, verificationUriComplete: dict[ChallengeKey.verificationUriComplete]?.string,
            userCode: code, expiresIn: dict[ChallengeKey.expiresIn]?.int64 ?? 0)
    }

    /// `SignInProgress(s flowId, s stage, a{sv} details)`; nil for a signal that is not one.
    static func signInProgress(_ arguments: [DBusValue]) -> SignInProgress? {
        guard arguments.count == 3, let stage = arguments[1].string.flatMap(SignInStage.init) else { return nil }
        let details = arguments[2].vardict
        return SignInProgress(
            stage: stage, url: details?[SignInProgressKey.url]?.string,
            reason: details?[SignInProgressKey.reason]?.string)
    }

    /// `GetAccounts`' `aa{sv}`.
    static func accounts(_ value: DBusValue?) throws(BrokerError) -> [Account] {
        guard let list = value?.vardictArray else {
            throw malformed("\(Broker1Method.getAccounts.rawValue) did not return aa{sv}")
        }
        var accounts: [Account] = []
        for dict in list {
            if let account = try account(.vardict(dict)) { accounts.append(account) }
        }
        return accounts
    }

    static func malformed(_ what: String) -> BrokerError {
        .dbus(
            name: "org.freedesktop.DBus.Error.InvalidSignature",
            message: "the broker's reply is not what the contract says: \(what)")
    }
}
