import BrokerCore
import DBus
import Identity
import Locking
import Logging

/// `/io/shareddevice/Broker1`, the interface `io.shareddevice.Broker1`: adapts D-Bus calls to the
/// ``BrokerService``'s core and its answers back, with no logic of its own.
///
/// The D-Bus layer has already checked each call's signature against the contract, so the
/// arguments here have the declared types; what they contain is the core's to judge.
final class BrokerObject: DBusObject, Broker1Handler {
    let interfaces: [DBusInterfaceDescription] = [.broker1]
    private let broker: Broker
    private let logger: Logger
    /// The properties, cached so that Get/GetAll never wait for the broker actor.
    private let properties: PropertyCache
    private let callers: CallerPolicy
    /// The last `GetCurrentAccount` answer for an app that has seen the current account.
    private let seenReply = Locked<(account: Account?, reply: DBusPreparedReply)?>(nil)

    init(service: BrokerService, logger: Logger) {
        self.broker = service.broker
        self.logger = logger
        self.properties = service.properties
        self.callers = service.callers
    }

    func propertyValues(interface: String) -> [String: DBusValue] {
        interface == DBusInterfaceDescription.broker1.name ? properties.values : [:]
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        do throws(BrokerFailure) {
            // The D-Bus layer admits only the contract's members, so this finds every call.
            guard let method = Broker1Method(rawValue: call.member) else {
                throw BrokerFailure(.notSupported, "\(call.member) is not a method of \(BrokerNames.interface)")
            }
            try BusMarshalling.checkOptions(method, call.arguments)
            try await callers.authorize(sender: call.sender, clientId: Self.clientId(of: call, method))
            return try await handle(method, call)
        } catch {
            refused(call, error)
            throw BusMarshalling.error(error)
        }
    }

    /// Logs a refusal; one the contract does not list for the method (its
    /// `io.shareddevice.Contract.Errors`) breaks the promise docs/dbus-api.md makes apps, so it is
    /// logged as the broker's bug to fix, in the XML or in the code.
    private func refused(_ call: DBusMethodCall, _ error: BrokerFailure) {
        let metadata: Logger.Metadata = [
            "method": "\(call.member)", "sender": "\(call.sender)", "error": "\(error.code.rawValue)",
        ]
        if let method = Broker1Method(rawValue: call.member), !method.errors.contains(error.code) {
            logger.warning("a call got an error its method's contract does not list", metadata: metadata)
        } else {
            logger.debug("call refused", metadata: metadata)
        }
    }

    /// The reads that change nothing, answered on the bus thread when the caller is known (the
    /// ``CallerPolicy`` has its credentials) and the broker's state has the answer; everything
    /// else goes to ``handleMethodCall(_:)``.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? {
        guard let method = Broker1Method(rawValue: call.member), Self.readsOnly.contains(method),
            let authorized = callers.authorizeKnownCaller(
                sender: call.sender, clientId: Self.clientId(of: call, method))
        else { return nil }
        do throws(BrokerFailure) {
            try BusMarshalling.checkOptions(method, call.arguments)
            try authorized.get()
            return try answerFromState(method, call)
        } catch {
            refused(call, error)
            return .error(BusMarshalling.error(error))
        }
    }

    private static let readsOnly: Set<Broker1Method> = [
        .getDeviceInformation, .getCurrentAccount, .acquireTokenSilent, .getAccounts,
    ]

    private func answerFromState(_ method: Broker1Method, _ call: DBusMethodCall) throws(BrokerFailure) -> DBusAnswer? {
        let a = call.arguments
        switch method {
        case .getDeviceInformation:
            return .values([BusMarshalling.deviceInformation(broker.deviceInformation())])
        case .getCurrentAccount:
            guard let seen = try broker.currentAccountIfSeen(clientId: a[0].string ?? "") else { return nil }
            return seenAnswer(seen.current)
        case .acquireTokenSilent:
            // A claims challenge asks for a token newer than the cached one: never from the cache.
            let options = a[3].vardict ?? [:]
            guard try !BusMarshalling.boolOption(options, OptionKey.forceRefresh), options[OptionKey.claims] == nil,
                let result = try broker.cachedTokenIfFresh(
                    clientId: a[0].string ?? "", scopes: a[1].stringArray ?? [],
                    accountId: a[2].string ?? "")
            else { return nil }
            return .values([BusMarshalling.tokenResult(result)])
        case .getAccounts:
            return .values([BusMarshalling.accounts(try broker.accounts(clientId: a[0].string ?? ""))])
        default:
            return nil
        }
    }

    /// `GetCurrentAccount`'s answer to an app that has seen the current account: (current,
    /// current), the same for every app until the account changes, so it is marshalled once and
    /// kept (`DBusPreparedReply`), not rebuilt per call.
    private func seenAnswer(_ account: Account?) -> DBusAnswer {
        if let kept = seenReply.withLock({ $0 }), kept.account == account { return .prepared(kept.reply) }
        let values = [BusMarshalling.account(account), BusMarshalling.account(account)]
        // BusMarshalling's strings are always valid for D-Bus: this fails only when libdbus is out
        // of memory, and the answer is then built again per call.
        guard let reply = try? DBusPreparedReply(values) else { return .values(values) }
        seenReply.withLock { $0 = (account, reply) }
        return .prepared(reply)
    }

    /// The clientId a call acts for, as the contract places it (``Broker1Method/clientIdArgument``).
    private static func clientId(of call: DBusMethodCall, _ method: Broker1Method) -> String? {
        method.clientIdArgument.flatMap { call.arguments.indices.contains($0) ? call.arguments[$0].string : nil }
    }

    // MARK: Broker1Handler: each method of the contract, to its call of the core

    func getDeviceInformation(caller: String) async throws(BrokerFailure) -> Broker1Reply.GetDeviceInformation {
        .init(information: BusMarshalling.deviceInformation(broker.deviceInformation()))
    }

    func getSignInOptions(clientId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.GetSignInOptions
    {
        .init(options: BusMarshalling.signInOptions(try await broker.signInOptions(clientId: clientId)))
    }

    func getCurrentAccount(clientId: String, caller: String) async throws(BrokerFailure)
        -> Broker1Reply.GetCurrentAccount
    {
        let seen = try await broker.currentAccount(clientId: clientId)
        return .init(current: BusMarshalling.account(seen.current), previous: BusMarshalling.account(seen.previous))
    }

    func signInWithPassword(
        clientId: String, username: String, password: String, scopes: [String],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.SignInWithPassword {
        let result = try await broker.signInWithPassword(
            clientId: clientId, username: username, password: password, scopes: scopes)
        return .init(result: BusMarshalling.tokenResult(result))
    }

    func startSignIn(
        clientId: String, username: String, scopes: [String], options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.StartSignIn {
        let method = try BusMarshalling.stringOption(options, OptionKey.method) ?? SignInMethod.emailCode.rawValue
        switch SignInMethod(rawValue: method) {
        case .emailCode?:
            let started = try await broker.startSignIn(
                clientId: clientId, username: username, scopes: scopes, owner: caller)
            return .init(flowId: started.flowId, challenge: BusMarshalling.challenge(started.challenge))
        case .deviceCode?:
            let started = try await broker.startDeviceSignIn(clientId: clientId, scopes: scopes, owner: caller)
            return .init(flowId: started.flowId, challenge: BusMarshalling.deviceChallenge(started.challenge))
        case nil:
            throw BrokerFailure(
                .invalidArgument,
                "option method must be \(SignInMethod.allCases.map(\.rawValue).joined(separator: " or "))")
        }
    }

    func submitCode(flowId: String, code: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.SubmitCode
    {
        .init(
            result: BusMarshalling.tokenResult(try await broker.submitCode(flowId: flowId, code: code, owner: caller)))
    }

    func finishSignIn(flowId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.FinishSignIn {
        .init(result: BusMarshalling.tokenResult(try await broker.finishSignIn(flowId: flowId, owner: caller)))
    }

    func resendCode(flowId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.ResendCode {
        .init(challenge: BusMarshalling.challenge(try await broker.resendCode(flowId: flowId, owner: caller)))
    }

    func cancelSignIn(flowId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.CancelSignIn {
        try await broker.cancelSignIn(flowId: flowId, owner: caller)
        return .init()
    }

    func acquireTokenInteractive(
        clientId: String, scopes: [String], options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.AcquireTokenInteractive {
        let result = try await broker.acquireTokenInteractive(
            clientId: clientId, scopes: scopes, prompt: try BusMarshalling.promptOption(options),
            loginHint: try BusMarshalling.stringOption(options, OptionKey.loginHint),
            flowId: try BusMarshalling.stringOption(options, OptionKey.flowId) ?? "", owner: caller,
            claims: try Self.claimsOption(options))
        return .init(result: BusMarshalling.tokenResult(result))
    }

    func acquireTokenSilent(
        clientId: String, scopes: [String], accountId: String, options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.AcquireTokenSilent {
        let result = try await broker.acquireTokenSilent(
            clientId: clientId, scopes: scopes, accountId: accountId,
            forceRefresh: try BusMarshalling.boolOption(options, OptionKey.forceRefresh),
            claims: try Self.claimsOption(options))
        return .init(result: BusMarshalling.tokenResult(result))
    }

    /// The `claims` option, refused here when it is no claims request: before anything is asked.
    static func claimsOption(_ options: [String: DBusValue]) throws(BrokerFailure) -> String? {
        guard let claims = try BusMarshalling.stringOption(options, OptionKey.claims) else { return nil }
        _ = try ClaimsRequest.decode(claims)
        return claims
    }

    func getAccounts(clientId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.GetAccounts {
        .init(accounts: BusMarshalling.accounts(try broker.accounts(clientId: clientId)))
    }

    func signOut(
        clientId: String, accountId: String, options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.SignOut {
        let outcome = try await broker.signOut(
            clientId: clientId, accountId: accountId,
            fromBrowser: try BusMarshalling.boolOption(options, OptionKey.signoutFromBrowser))
        return .init(result: BusMarshalling.signOutOutcome(outcome))
    }
}
