import BrokerCore
import DBus
import Logging
import Synchronization

/// `/io/shareddevice/Broker1`: adapts D-Bus calls to the ``Broker`` and its answers back.
///
/// The D-Bus layer has already checked each call's signature against the contract, so the
/// arguments here have the declared types; what they contain is the core's to judge.
final class BrokerObject: DBusObject {
    let interfaces: [DBusInterfaceDescription] = [.broker1]
    private let broker: Broker
    private let logger: Logger
    /// The properties, cached so that Get/GetAll never wait for the broker actor.
    private let properties: PropertyCache
    private let callers: CallerPolicy
    /// The last `GetCurrentAccount` answer for an app that has seen the current account.
    private let seenReply = Mutex<(account: Account?, reply: DBusPreparedReply)?>(nil)

    init(broker: Broker, logger: Logger, properties: PropertyCache, callers: CallerPolicy) {
        self.broker = broker
        self.logger = logger
        self.properties = properties
        self.callers = callers
    }

    func propertyValues(interface: String) -> [String: DBusValue] {
        interface == DBusInterfaceDescription.broker1.name ? properties.values : [:]
    }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        do {
            try await callers.authorize(sender: call.sender, clientId: Self.clientId(of: call))
            return try await dispatch(call)
        } catch {
            logger.debug("call refused", metadata: ["method": "\(call.member)", "sender": "\(call.sender)",
                                                    "error": "\(error.code.rawValue)"])
            throw BusMarshalling.error(error)
        }
    }

    /// The reads that change nothing, answered on the bus thread when the caller is known (the
    /// ``CallerPolicy`` has its credentials) and the broker's state has the answer; everything
    /// else goes to ``handleMethodCall(_:)``.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? {
        guard Self.readsOnly.contains(call.member),
              let authorized = callers.authorizeKnownCaller(sender: call.sender, clientId: Self.clientId(of: call))
        else { return nil }
        do throws(BrokerFailure) {
            try authorized.get()
            return try answerFromState(call)
        } catch {
            logger.debug("call refused", metadata: ["method": "\(call.member)", "sender": "\(call.sender)",
                                                    "error": "\(error.code.rawValue)"])
            return .error(BusMarshalling.error(error))
        }
    }

    private static let readsOnly: Set<String> = ["GetDeviceInformation", "GetCurrentAccount", "AcquireTokenSilent", "GetAccounts"]

    private func answerFromState(_ call: DBusMethodCall) throws(BrokerFailure) -> DBusAnswer? {
        let a = call.arguments
        switch call.member {
        case "GetDeviceInformation":
            return .values([BusMarshalling.deviceInformation(broker.deviceInformation())])
        case "GetCurrentAccount":
            guard let seen = try broker.currentAccountIfSeen(clientId: a[0].string ?? "") else { return nil }
            return seenAnswer(seen.current)
        case "AcquireTokenSilent":
            guard try !BusMarshalling.boolOption(a[3].vardict ?? [:], OptionKey.forceRefresh),
                  let result = try broker.cachedTokenIfFresh(clientId: a[0].string ?? "", scopes: a[1].stringArray ?? [],
                                                             accountId: a[2].string ?? "")
            else { return nil }
            return .values([BusMarshalling.tokenResult(result)])
        case "GetAccounts":
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
        // An account that libdbus cannot carry (a NUL in a name) gets the usual error reply.
        guard let reply = try? DBusPreparedReply(values) else { return .values(values) }
        seenReply.withLock { $0 = (account, reply) }
        return .prepared(reply)
    }

    /// The clientId a call acts for: the first argument of every method that takes one.
    private static func clientId(of call: DBusMethodCall) -> String? {
        switch call.member {
        case "GetCurrentAccount", "SignInWithPassword", "AcquireTokenSilent", "GetAccounts", "SignOut", "StartSignIn",
             "AcquireTokenInteractive":
            return call.arguments.first?.string
        default:
            return nil
        }
    }

    private func dispatch(_ call: DBusMethodCall) async throws(BrokerFailure) -> [DBusValue] {
        let a = call.arguments
        switch call.member {
        case "GetDeviceInformation":
            return [BusMarshalling.deviceInformation(broker.deviceInformation())]
        case "GetCurrentAccount":
            let seen = try await broker.currentAccount(clientId: a[0].string ?? "")
            return [BusMarshalling.account(seen.current), BusMarshalling.account(seen.previous)]
        case "SignInWithPassword":
            let result = try await broker.signInWithPassword(
                clientId: a[0].string ?? "", username: a[1].string ?? "", password: a[2].string ?? "",
                scopes: a[3].stringArray ?? [])
            return [BusMarshalling.tokenResult(result)]
        case "AcquireTokenSilent":
            let options = a[3].vardict ?? [:]
            let result = try await broker.acquireTokenSilent(
                clientId: a[0].string ?? "", scopes: a[1].stringArray ?? [], accountId: a[2].string ?? "",
                forceRefresh: try BusMarshalling.boolOption(options, OptionKey.forceRefresh))
            return [BusMarshalling.tokenResult(result)]
        case "GetAccounts":
            return [BusMarshalling.accounts(try broker.accounts(clientId: a[0].string ?? ""))]
        case "SignOut":
            let options = a[2].vardict ?? [:]
            let outcome = try await broker.signOut(clientId: a[0].string ?? "", accountId: a[1].string ?? "",
                                                   fromBrowser: try BusMarshalling.boolOption(options, OptionKey.signoutFromBrowser))
            return [BusMarshalling.signOutOutcome(outcome)]
        case "StartSignIn":
            let started = try await broker.startSignIn(clientId: a[0].string ?? "", username: a[1].string ?? "",
                                                       scopes: a[2].stringArray ?? [], owner: call.sender)
            return [.string(started.flowId), BusMarshalling.challenge(started.challenge)]
        case "SubmitCode":
            let result = try await broker.submitCode(flowId: a[0].string ?? "", code: a[1].string ?? "", owner: call.sender)
            return [BusMarshalling.tokenResult(result)]
        case "ResendCode":
            return [BusMarshalling.challenge(try await broker.resendCode(flowId: a[0].string ?? "", owner: call.sender))]
        case "CancelSignIn":
            try await broker.cancelSignIn(flowId: a[0].string ?? "", owner: call.sender)
            return []
        case "AcquireTokenInteractive":
            let options = a[2].vardict ?? [:]
            let result = try await broker.acquireTokenInteractive(
                clientId: a[0].string ?? "", scopes: a[1].stringArray ?? [],
                prompt: try BusMarshalling.promptOption(options), loginHint: try BusMarshalling.stringOption(options, OptionKey.loginHint),
                flowId: try BusMarshalling.stringOption(options, OptionKey.flowId) ?? "", owner: call.sender)
            return [BusMarshalling.tokenResult(result)]
        default:
            throw BrokerFailure(.notSupported, "\(call.member) is not a method of \(BrokerNames.interface)")
        }
    }
}

/// Property values shared between the connection's thread (reads) and the broker (writes).
final class PropertyCache: Sendable {
    private let storage: Mutex<[String: DBusValue]>
    init(_ initial: [String: DBusValue]) { storage = Mutex(initial) }
    var values: [String: DBusValue] { storage.withLock { $0 } }
    func set(_ name: String, _ value: DBusValue) { storage.withLock { $0[name] = value } }
}
