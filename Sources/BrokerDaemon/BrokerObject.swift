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
final class BrokerObject: DBusObject, Broker1Handler, Broker1StateAnswers {
    let interfaces: [DBusInterfaceDescription] = [.broker1]
    /// What ``CallGate`` never refuses for the broker's load: `SignOut` (a person leaving must be
    /// able to, however busy the broker is), `CancelSignIn` (it frees what a flood holds) and the
    /// reads of the broker's state. Not `AcquireTokenSilent`: answered from the cache when it can
    /// be, it is a refresh at the provider otherwise.
    static let neverRefusedForLoad: Set<String> = [
        Broker1Method.signOut, .cancelSignIn, .getDeviceInformation, .getCurrentAccount, .getAccounts,
    ].reduce(into: []) { $0.insert($1.rawValue) }
    private let broker: Broker
    private let logger: Logger
    /// The properties, cached so that Get/GetAll never wait for the broker actor.
    private let properties: PropertyCache
    private let callers: CallerPolicy
    /// The last `GetCurrentAccount` answer for an app that has seen the current account,
    /// marshalled once, and the account it is of.
    private let seenReply = Locked<(account: Account?, prepared: DBusPreparedReply)?>(nil)

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

    /// The methods the contract marks `AnswersFromState`, answered on the bus thread when the
    /// caller is known (the ``CallerPolicy`` has its credentials) and the broker's state has the
    /// answer; everything else goes to ``handleMethodCall(_:)``.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? {
        guard let method = Broker1Method(rawValue: call.member), method.answersFromState,
            let authorized = callers.authorizeKnownCaller(
                sender: call.sender, clientId: Self.clientId(of: call, method))
        else { return nil }
        do throws(BrokerFailure) {
            try BusMarshalling.checkOptions(method, call.arguments)
            try authorized.get()
            if method == .getCurrentAccount, let clientId = Self.clientId(of: call, method),
                let prepared = try preparedCurrentAccount(clientId: clientId)
            {
                return .prepared(prepared)
            }
            guard let arguments = try answerFromState(method, call) else { return nil }
            return .values(arguments)
        } catch {
            refused(call, error)
            return .error(BusMarshalling.error(error))
        }
    }

    /// `GetCurrentAccount`'s answer to an app that has seen the current account: the same for
    /// every app until the account changes, so the one marshalled before (`DBusPreparedReply`),
    /// copied per caller rather than rebuilt; nil when the call must go the normal way.
    private func preparedCurrentAccount(clientId: String) throws(BrokerFailure) -> DBusPreparedReply? {
        guard let seen = try broker.currentAccountIfSeen(clientId: clientId) else { return nil }
        if let kept = seenReply.withLock({ $0 }), kept.account == seen.current { return kept.prepared }
        let reply = Broker1Reply.GetCurrentAccount(current: seen.current, previous: seen.current)
        // The encoded strings are always valid for D-Bus: this fails only when libdbus is out of
        // memory, and the answer is then built per call.
        guard let prepared = try? DBusPreparedReply(reply.arguments) else { return nil }
        seenReply.withLock { $0 = (seen.current, prepared) }
        return prepared
    }

    /// The clientId a call acts for, as the contract places it (``Broker1Method/clientIdArgument``).
    private static func clientId(of call: DBusMethodCall, _ method: Broker1Method) -> String? {
        method.clientIdArgument.flatMap { call.arguments.indices.contains($0) ? call.arguments[$0].string : nil }
    }

    // MARK: Broker1StateAnswers: the reads answered from the core's published state

    func getDeviceInformationFromState() throws(BrokerFailure) -> Broker1Reply.GetDeviceInformation? {
        .init(information: broker.deviceInformation())
    }

    func getCurrentAccountFromState(clientId: String) throws(BrokerFailure) -> Broker1Reply.GetCurrentAccount? {
        guard let seen = try broker.currentAccountIfSeen(clientId: clientId) else { return nil }
        return Broker1Reply.GetCurrentAccount(current: seen.current, previous: seen.current)
    }

    func acquireTokenSilentFromState(
        clientId: String, scopes: [String], accountId: String, options: [String: DBusValue]
    ) throws(BrokerFailure) -> Broker1Reply.AcquireTokenSilent? {
        // A claims challenge asks for a token newer than the cached one: never from the cache.
        guard try !BusMarshalling.boolOption(options, OptionKey.forceRefresh), options[OptionKey.claims] == nil,
            let result = try broker.cachedTokenIfFresh(clientId: clientId, scopes: scopes, accountId: accountId)
        else { return nil }
        return .init(result: result.result)
    }

    func getAccountsFromState(clientId: String) throws(BrokerFailure) -> Broker1Reply.GetAccounts? {
        .init(accounts: try broker.accounts(clientId: clientId))
    }

    // MARK: Broker1Handler: each method of the contract, to its call of the core

    func getDeviceInformation(caller: String) async throws(BrokerFailure) -> Broker1Reply.GetDeviceInformation {
        .init(information: broker.deviceInformation())
    }

    func getSignInOptions(clientId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.GetSignInOptions
    {
        .init(options: try await broker.signInOptions(clientId: clientId))
    }

    func getCurrentAccount(clientId: String, caller: String) async throws(BrokerFailure)
        -> Broker1Reply.GetCurrentAccount
    {
        let seen = try await broker.currentAccount(clientId: clientId, caller: caller)
        return .init(current: seen.current, previous: seen.previous)
    }

    func signInWithPassword(
        clientId: String, username: String, password: String, scopes: [String],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.SignInWithPassword {
        let result = try await broker.signInWithPassword(
            clientId: clientId, username: username, password: password, scopes: scopes)
        return .init(result: result.result)
    }

    func startSignIn(
        clientId: String, username: String, scopes: [String], options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.StartSignIn {
        let methods = SignInFlow.startedBySignInMethod
        let method = try BusMarshalling.stringOption(options, OptionKey.method) ?? methods.first?.rawValue ?? ""
        guard let flow = SignInFlow(rawValue: method), methods.contains(flow) else {
            throw BrokerFailure(
                .invalidArgument, "option method must be \(methods.map(\.rawValue).joined(separator: " or "))")
        }
        let started = try await broker.startSignIn(
            flow, clientId: clientId, username: username, scopes: scopes, owner: caller)
        return .init(flowId: started.flowId, challenge: started.challenge)
    }

    func submitCode(flowId: String, code: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.SubmitCode
    {
        .init(result: try await broker.submitCode(flowId: flowId, code: code, owner: caller).result)
    }

    func finishSignIn(flowId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.FinishSignIn {
        .init(result: try await broker.finishSignIn(flowId: flowId, owner: caller).result)
    }

    func resendCode(flowId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.ResendCode {
        .init(challenge: try await broker.resendCode(flowId: flowId, owner: caller))
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
        return .init(result: result.result)
    }

    func acquireTokenSilent(
        clientId: String, scopes: [String], accountId: String, options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.AcquireTokenSilent {
        let result = try await broker.acquireTokenSilent(
            clientId: clientId, scopes: scopes, accountId: accountId,
            forceRefresh: try BusMarshalling.boolOption(options, OptionKey.forceRefresh),
            claims: try Self.claimsOption(options))
        return .init(result: result.result)
    }

    /// The `claims` option, refused here when it is no claims request: before anything is asked.
    static func claimsOption(_ options: [String: DBusValue]) throws(BrokerFailure) -> String? {
        guard let claims = try BusMarshalling.stringOption(options, OptionKey.claims) else { return nil }
        _ = try ClaimsRequest.decode(claims)
        return claims
    }

    func getAccounts(clientId: String, caller: String) async throws(BrokerFailure) -> Broker1Reply.GetAccounts {
        .init(accounts: try broker.accounts(clientId: clientId))
    }

    func signOut(
        clientId: String, accountId: String, options: [String: DBusValue],
        caller: String
    ) async throws(BrokerFailure) -> Broker1Reply.SignOut {
        let outcome = try await broker.signOut(
            clientId: clientId, accountId: accountId,
            fromBrowser: try BusMarshalling.boolOption(options, OptionKey.signoutFromBrowser))
        return .init(result: outcome)
    }
}
