import BrokerAPI
import BrokerCore
import DBus
import FoundationEssentials
import Locking
import Logging

/// `/com/microsoft/identity/broker1`, Microsoft's broker protocol (`com.microsoft.identity.Broker1`),
/// for apps written for Microsoft's Linux broker: a second adapter over the same ``BrokerService``
/// as ``BrokerObject``, so both interfaces see one account and one token cache. It translates
/// requests (``MicrosoftBrokerRequest``) and replies (``MicrosoftBrokerResponse``) and nothing
/// more: every decision is the core's.
///
/// Every answer is a JSON string, failures included (``MicrosoftBrokerFailure``): clients read a
/// D-Bus error as a broken broker.
final class MicrosoftBroker1Object: DBusObject, MicrosoftBroker1Handler {
    let interfaces: [DBusInterfaceDescription] = [.microsoftBroker1]
    /// What ``CallGate`` never refuses for the broker's load, as ``BrokerObject`` says.
    static let neverRefusedForLoad: Set<String> = [
        MicrosoftBroker1Method.removeAccount, .cancelInteractiveFlow, .getAccounts, .getLinuxBrokerVersion,
    ].reduce(into: []) { $0.insert($1.rawValue) }
    private let broker: Broker
    private let callers: CallerPolicy
    private let logger: Logger
    /// The interactive flows each caller started here, for `cancelInteractiveFlow` (whose
    /// request names none).
    private let interactiveFlows = Locked<[String: Set<String>]>([:])

    init(service: BrokerService, logger: Logger) {
        self.broker = service.broker
        self.callers = service.callers
        self.logger = logger
    }

    func propertyValues(interface: String) -> [String: DBusValue] { [:] }

    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue] {
        // The D-Bus layer admits only the contract's members, with the contract's signature.
        guard let method = MicrosoftBroker1Method(rawValue: call.member) else { return [] }
        return try await handle(method, call)
    }

    // MARK: MicrosoftBroker1Handler

    func getAccounts(protocolVersion: String, correlationId: String, requestJSON: String, caller: String)
        async throws(BrokerFailure) -> MicrosoftBroker1Reply.GetAccounts
    {
        await answer(.getAccounts, correlationId, requestJSON, caller) { request throws(MicrosoftBrokerFailure) in
            MicrosoftBrokerResponse.accounts(
                try self.core { () throws(BrokerFailure) in
                    try self.broker.accounts(clientId: request.clientId ?? "")
                })
        }
    }

    func acquireTokenSilently(protocolVersion: String, correlationId: String, requestJSON: String, caller: String)
        async throws(BrokerFailure) -> MicrosoftBroker1Reply.AcquireTokenSilently
    {
        await answer(.acquireTokenSilently, correlationId, requestJSON, caller) {
            request throws(MicrosoftBrokerFailure) in
            let clientId = request.clientId ?? ""
            let tokens = try await self.core(namedAccount: request.account != nil) { () async throws(BrokerFailure) in
                try await self.broker.acquireTokenSilent(
                    clientId: clientId, scopes: request.scopes ?? [],
                    accountId: self.accountId(request), forceRefresh: false, claims: request.claims)
            }
            return MicrosoftBrokerResponse.token(tokens, clientId: clientId)
        }
    }

    func acquireTokenInteractively(
        protocolVersion: String, correlationId: String, requestJSON: String, caller: String
    ) async throws(BrokerFailure) -> MicrosoftBroker1Reply.AcquireTokenInteractively {
        await answer(.acquireTokenInteractively, correlationId, requestJSON, caller) {
            request throws(MicrosoftBrokerFailure) in
            let clientId = request.clientId ?? ""
            let prompt: Prompt?
            if let text = request.prompt, !text.isEmpty {
                guard let known = Prompt(rawValue: text) else {
                    throw .contractViolation("prompt \(text) is not one of \(Prompt.allCases.map(\.rawValue))")
                }
                prompt = known
            } else {
                prompt = nil
            }
            let flowId = "microsoft-broker1-\(UUID().uuidString.lowercased())"
            self.interactiveFlows.withLock { _ = $0[caller, default: []].insert(flowId) }
            defer { self.interactiveFlows.withLock { _ = $0[caller]?.remove(flowId) } }
            let hint = request.username.flatMap { $0.isEmpty ? nil : $0 } ?? request.account?.username
            let tokens = try await self.core { () async throws(BrokerFailure) in
                try await self.broker.acquireTokenInteractive(
                    clientId: clientId, scopes: request.scopes ?? [], prompt: prompt,
                    loginHint: hint.flatMap { $0.isEmpty ? nil : $0 }, flowId: flowId, owner: caller,
                    claims: request.claims)
            }
            return MicrosoftBrokerResponse.token(tokens, clientId: clientId)
        }
    }

    func removeAccount(protocolVersion: String, correlationId: String, requestJSON: String, caller: String)
        async throws(BrokerFailure) -> MicrosoftBroker1Reply.RemoveAccount
    {
        await answer(.removeAccount, correlationId, requestJSON, caller) { request throws(MicrosoftBrokerFailure) in
            do throws(BrokerFailure) {
                _ = try await self.broker.signOut(
                    clientId: request.clientId ?? "", accountId: self.accountId(request))
            } catch {
                // Nobody (or another account) is signed in: the account is already gone.
                guard error.code == .noAccount else { throw MicrosoftBrokerFailure(error) }
            }
            return MicrosoftBrokerResponse.empty
        }
    }

    func cancelInteractiveFlow(protocolVersion: String, correlationId: String, requestJSON: String, caller: String)
        async throws(BrokerFailure) -> MicrosoftBroker1Reply.CancelInteractiveFlow
    {
        await answer(.cancelInteractiveFlow, correlationId, requestJSON, caller) {
            _ throws(MicrosoftBrokerFailure) in
            for flowId in self.interactiveFlows.withLock({ $0[caller] ?? [] }) {
                // A flow that ended meanwhile is not an error: the caller's flows are what is asked.
                try? await self.broker.cancelSignIn(flowId: flowId, owner: caller)
            }
            return MicrosoftBrokerResponse.empty
        }
    }

    func getLinuxBrokerVersion(protocolVersion: String, correlationId: String, requestJSON: String, caller: String)
        async throws(BrokerFailure) -> MicrosoftBroker1Reply.GetLinuxBrokerVersion
    {
        await answer(.getLinuxBrokerVersion, correlationId, requestJSON, caller) { _ throws(MicrosoftBrokerFailure) in
            MicrosoftBrokerResponse.version(self.broker.deviceInformation().brokerVersion)
        }
    }

    func acquirePrtSsoCookie(protocolVersion: String, correlationId: String, requestJSON: String, caller: String)
        async throws(BrokerFailure) -> MicrosoftBroker1Reply.AcquirePrtSsoCookie
    {
        await answer(.acquirePrtSsoCookie, correlationId, requestJSON, caller) { _ throws(MicrosoftBrokerFailure) in
            throw MicrosoftBrokerFailure(
                status: .incorrectConfiguration,
                context:
                    "this broker has no primary refresh token: single sign-on cookies are Microsoft Entra's own, "
                    + "with no standard equivalent; sign in to the web site in the browser")
        }
    }

    func generateSignedHttpRequest(
        protocolVersion: String, correlationId: String, requestJSON: String, caller: String
    ) async throws(BrokerFailure) -> MicrosoftBroker1Reply.GenerateSignedHttpRequest {
        await answer(.generateSignedHttpRequest, correlationId, requestJSON, caller) {
            _ throws(MicrosoftBrokerFailure) in
            throw MicrosoftBrokerFailure(
                status: .incorrectConfiguration,
                context:
                    "this broker issues bearer tokens only: proof-of-possession (signed HTTP requests) is "
                    + "Microsoft Entra's own, with no standard equivalent; request a bearer token")
        }
    }

    // MARK: Translation

    /// Reads the request, checks the caller as the native interface does, runs `body`, and turns
    /// every outcome into the reply's JSON.
    private func answer<Reply: MicrosoftBroker1JSONReply>(
        _ method: MicrosoftBroker1Method, _ correlationId: String, _ json: String, _ caller: String,
        _ body: (MicrosoftBrokerRequest) async throws(MicrosoftBrokerFailure) -> String
    ) async -> Reply {
        // The caller's correlation id, as logs and error objects show it: at most 64 characters,
        // escaped, so that a newline or an escape sequence in it cannot forge a log line or reach
        // the terminal of whoever reads the error.
        let correlationId = OutsideText.escaped(String(correlationId.prefix(64)))
        do throws(MicrosoftBrokerFailure) {
            let request = try MicrosoftBrokerRequest(json, for: method)
            try await core { () async throws(BrokerFailure) in
                try await callers.authorize(sender: caller, clientId: request.clientId)
            }
            try checkAuthority(request)
            logger.debug(
                "Microsoft broker protocol call",
                metadata: [
                    "method": "\(method.rawValue)", "sender": "\(caller)",
                    "correlationId": "\(correlationId)",
                ])
            return Reply(responseJSON: try await body(request))
        } catch {
            logger.debug(
                "Microsoft broker protocol call refused",
                metadata: [
                    "method": "\(method.rawValue)", "sender": "\(caller)", "status": "\(error.status.rawValue)",
                    "correlationId": "\(correlationId)",
                ])
            return Reply(responseJSON: MicrosoftBrokerResponse.error(error, correlationId: correlationId, for: method))
        }
    }

    /// The core's errors, as the protocol reports them.
    private func core<Value>(namedAccount: Bool = false, _ body: () async throws(BrokerFailure) -> Value)
        async throws(MicrosoftBrokerFailure) -> Value
    {
        do { return try await body() } catch { throw MicrosoftBrokerFailure(error, namedAccount: namedAccount) }
    }

    private func core<Value>(_ body: () throws(BrokerFailure) -> Value) throws(MicrosoftBrokerFailure) -> Value {
        do { return try body() } catch { throw MicrosoftBrokerFailure(error) }
    }

    /// The account a request names, as the core knows it: its `homeAccountId` ("" for the
    /// signed-in account, when the request names none).
    private func accountId(_ request: MicrosoftBrokerRequest) -> String {
        request.account?.homeAccountId ?? ""
    }

    /// Requests name Microsoft's cloud (`.../common`, `.../organizations`, `.../<tenant>`); the
    /// broker serves them from its configured provider, and refuses only a tenant that
    /// contradicts the configured tenant id.
    private func checkAuthority(_ request: MicrosoftBrokerRequest) throws(MicrosoftBrokerFailure) {
        let configured = broker.deviceInformation().tenantId
        guard let tenant = request.authorityTenant?.lowercased(), !configured.isEmpty,
            UUID(uuidString: tenant) != nil, tenant != configured.lowercased()
        else { return }
        throw MicrosoftBrokerFailure(
            status: .authorityUntrusted,
            context: "the authority names tenant \(tenant), but this device belongs to tenant \(configured)")
    }
}

/// Every reply of Microsoft's protocol is one JSON string (`responseJSON`), failures included, so
/// one translation (`answer`) builds them all.
protocol MicrosoftBroker1JSONReply {
    init(responseJSON: String)
}

extension MicrosoftBroker1Reply.AcquireTokenInteractively: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.AcquireTokenSilently: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.GetAccounts: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.RemoveAccount: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.AcquirePrtSsoCookie: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.GenerateSignedHttpRequest: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.CancelInteractiveFlow: MicrosoftBroker1JSONReply {}
extension MicrosoftBroker1Reply.GetLinuxBrokerVersion: MicrosoftBroker1JSONReply {}
