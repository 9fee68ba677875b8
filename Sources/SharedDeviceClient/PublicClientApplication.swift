import BrokerAPI
import DBus

/// An app's handle on the shared-device broker, in the shape of MSAL's
/// `MSALPublicClientApplication`: one per app (clientId), one bus connection each (opened again
/// on the next call if the bus drops it), safe to use from any task.
///
/// ```swift
/// let app = try PublicClientApplication(clientId: "mail-app")
/// let (current, previous) = try await app.currentAccount()
/// if current == nil, let previous { print("account \(previous.username) has been signed out") }
/// ```
public final class PublicClientApplication: Sendable {
    /// The app's registration at the identity provider.
    public let clientId: String
    /// How the app reaches the broker.
    public let configuration: BrokerClientConfiguration
    let link: BusLink

    /// Connects to the bus (the session bus, or `configuration.busAddress`). The broker itself is
    /// reached on the first call. Throws ``BrokerError/brokerUnavailable(_:)`` when there is no bus.
    public init(clientId: String, configuration: BrokerClientConfiguration = BrokerClientConfiguration())
        throws(BrokerError)
    {
        self.clientId = clientId
        self.configuration = configuration
        link = try BusLink(address: configuration.busAddress)
    }

    deinit { link.close() }

    // MARK: The device and its account

    /// The device's mode and facts (MSAL: `getDeviceInformation`). On a shared device
    /// `deviceMode == .shared`.
    public func deviceInformation() async throws(BrokerError) -> DeviceInformation {
        try await link.ask(.deviceInformation, timeout: configuration.queryTimeout)
    }

    /// The account signed in now and the one this app saw on its previous call (MSAL:
    /// `getCurrentAccount`). After a sign-out elsewhere: (nil, the user) once, then (nil, nil).
    public func currentAccount() async throws(BrokerError) -> (current: Account?, previous: Account?) {
        try await link.ask(.currentAccount(clientId: clientId), timeout: configuration.queryTimeout)
    }

    /// The accounts this app can use (MSAL: `allAccounts`): in shared mode, the device's one account.
    public func accounts() async throws(BrokerError) -> [Account] {
        try await link.ask(.accounts(clientId: clientId), timeout: configuration.queryTimeout)
    }

    // MARK: Signing in

    /// Which sign-in flows work with the device's provider, so that the app shows only the
    /// buttons that do. May read the provider's discovery document, so it waits as long as a
    /// token call (`configuration.tokenTimeout`).
    public func signInOptions() async throws(BrokerError) -> SignInOptions {
        try await link.ask(.signInOptions(clientId: clientId), timeout: configuration.tokenTimeout)
    }

    /// Signs in with a username and password (the provider's native password path or the
    /// resource-owner password grant). A wrong password throws ``BrokerError/invalidPassword(_:)``,
    /// an unknown user ``BrokerError/userNotFound(_:)``, someone else on a shared device
    /// ``BrokerError/accountAlreadySignedIn(_:)``.
    public func signIn(username: String, password: String, scopes: [String]) async throws(BrokerError) -> TokenResult {
        try await link.signInWithPassword(
            clientId: clientId, username: username, password: password, scopes: scopes,
            timeout: configuration.tokenTimeout
        ).result
    }

    /// Starts an email one-time-code sign-in (MSAL native authentication's `signIn(username:)`):
    /// the provider sends a code, and the returned state takes it.
    public func signIn(username: String, scopes: [String]) async throws(BrokerError) -> SignInCodeRequiredState {
        let started = try await link.startSignIn(
            clientId: clientId, username: username, scopes: scopes, options: [:], timeout: configuration.tokenTimeout)
        guard case .codeChallenge(let challenge) = started.challenge else {
            throw .malformedReply("StartSignIn for email-code returned another flow's challenge")
        }
        return SignInCodeRequiredState(
            flowId: started.flowId, challenge: challenge, link: link, configuration: configuration)
    }

    /// Starts a device-code sign-in (RFC 8628), for a device without a browser or a person who
    /// would rather use their phone: show the returned verification URI and user code, then wait
    /// with ``DeviceCodeSignIn/result()``.
    public func signInWithDeviceCode(scopes: [String]) async throws(BrokerError) -> DeviceCodeSignIn {
        let started = try await link.startSignIn(
            clientId: clientId, username: "", scopes: scopes,
            options: [.method: .string(SignInFlow.deviceCode.rawValue)], timeout: configuration.tokenTimeout)
        guard case .deviceCodeChallenge(let challenge) = started.challenge else {
            throw .malformedReply("StartSignIn for device-code returned another flow's challenge")
        }
        return DeviceCodeSignIn(
            flowId: started.flowId, challenge: challenge, link: link, configuration: configuration)
    }

    /// Starts a sign-in the person approves on their phone (OpenID Connect CIBA), where
    /// ``signInOptions()`` lists `ciba`: the provider asks `username` on their own phone; show
    /// the returned ``PhoneApprovalSignIn/bindingMessage`` and wait with
    /// ``PhoneApprovalSignIn/result()``. ``BrokerError/userNotFound(_:)`` when the provider knows
    /// no such user, ``BrokerError/notSupported(_:)`` when it offers no approval on a phone.
    public func signInWithPhoneApproval(username: String, scopes: [String]) async throws(BrokerError)
        -> PhoneApprovalSignIn
    {
        let started = try await link.startSignIn(
            clientId: clientId, username: username, scopes: scopes,
            options: [.method: .string(SignInFlow.ciba.rawValue)], timeout: configuration.tokenTimeout)
        guard case .phoneApprovalChallenge(let challenge) = started.challenge else {
            throw .malformedReply("StartSignIn for ciba returned another flow's challenge")
        }
        return PhoneApprovalSignIn(
            flowId: started.flowId, challenge: challenge, link: link, configuration: configuration)
    }

    /// Signs in in the system browser (MSAL: `acquireToken(with: MSALInteractiveTokenParameters)`).
    /// Waits up to `configuration.interactiveTimeout` for the person. Cancelling the task ends
    /// the browser flow in the broker and throws ``BrokerError/cancelled(_:)``.
    public func acquireToken(_ parameters: InteractiveTokenParameters) async throws(BrokerError) -> TokenResult {
        let flowId = Self.newFlowId()
        var options: [Broker1Call.AcquireTokenInteractiveOption: DBusValue] = [
            .prompt: .string(parameters.promptType.rawValue), .flowId: .string(flowId),
        ]
        if let hint = parameters.loginHint { options[.loginHint] = .string(hint) }
        let listener = try await progressListener(flowId: flowId, parameters.progress)
        defer { listener?.cancel() }
        do {
            return try await link.acquireTokenInteractive(
                clientId: clientId, scopes: parameters.scopes, options: options,
                timeout: configuration.interactiveTimeout
            ).result
        } catch {
            if Task.isCancelled {
                // This task is cancelled, so tell the broker from one that is not.
                let link = self.link
                let timeout = configuration.queryTimeout
                await Task { _ = try? await link.cancelSignIn(flowId: flowId, timeout: timeout) }.value
            }
            throw error
        }
    }

    /// Forwards this flow's `SignInProgress` signals to `progress`; subscribed before the call,
    /// so the first stage cannot be missed.
    private func progressListener(flowId: String, _ progress: (@Sendable (SignInProgress) -> Void)?)
        async throws(BrokerError) -> Task<Void, Never>?
    {
        guard let progress else { return nil }
        let signals = try await link.connection().signals(
            Broker1Signals.SignInProgress.rule(arg0: flowId), as: Broker1Signals.SignInProgress.init)
        return Task {
            for await signal in signals {
                // A stage a newer broker names and this library does not know is left out.
                guard let stage = SignInStage(rawValue: signal.stage) else { continue }
                progress(SignInProgress(stage: stage, url: signal.details.url, reason: signal.details.reason))
            }
        }
    }

    // MARK: Tokens and sign-out

    /// A token without user interaction (MSAL: `acquireTokenSilent`): from the cache, or with the
    /// refresh token. Throws ``BrokerError/interactionRequired(_:)`` when neither works: then
    /// call ``acquireToken(_:)`` (or sign in again).
    public func acquireTokenSilent(_ parameters: SilentTokenParameters) async throws(BrokerError) -> TokenResult {
        try await link.acquireTokenSilent(
            clientId: clientId, scopes: parameters.scopes, accountId: parameters.account?.identifier ?? "",
            options: parameters.claims.map { [.forceRefresh: .bool(parameters.forceRefresh), .claims: .string($0)] }
                ?? [.forceRefresh: .bool(parameters.forceRefresh)],
            timeout: configuration.tokenTimeout
        ).result
    }

    /// Signs out (MSAL: `signout(with:signoutParameters:)`). In shared mode this signs the whole
    /// device out, and every app hears of it. `account` nil means the signed-in account.
    /// The result says what the provider could not do (revoke tokens, end the browser session);
    /// the account is signed out either way. ``SignOutResult/browserLogoutOpened`` says that the
    /// provider's sign-out page was handed to the browser, which is all the broker knows of the
    /// browser session; ``SignOutResult/browserSessionEnded`` is deprecated and always false.
    @discardableResult
    public func signOut(account: Account?, parameters: SignoutParameters = SignoutParameters())
        async throws(BrokerError) -> SignOutResult
    {
        try await link.signOut(
            clientId: clientId, accountId: account?.identifier ?? "",
            options: [.signoutFromBrowser: .bool(parameters.signoutFromBrowser)], timeout: configuration.tokenTimeout
        ).result
    }

    // MARK: Changes

    /// Every change of the device's account, as it happens (the `AccountChanged` signal), for as
    /// long as the app iterates: across broker restarts (then one change with reason
    /// ``AccountChange/Reason/brokerRestarted`` reports the state) and dropped bus connections
    /// (reconnected with backoff). Subscribes when accessed; use ``subscribeToAccountChanges()``
    /// to know the subscription is in place before going on. Ends when the iterating task is
    /// cancelled; it does not throw.
    public var accountChanges: AsyncThrowingStream<AccountChange, any Error> {
        feed.stream(startingWith: nil)
    }

    /// ``accountChanges``, returned once the bus delivers the signal to this app: no change after
    /// this returns is missed.
    public func subscribeToAccountChanges() async throws(BrokerError) -> AsyncThrowingStream<AccountChange, any Error> {
        feed.stream(startingWith: try await feed.subscribe())
    }

    private var feed: AccountChangeFeed { AccountChangeFeed(link: link, queryTimeout: configuration.queryTimeout) }

    /// A fresh id for an interactive flow: 128 random bits, in hex.
    private static func newFlowId() -> String {
        var generator = SystemRandomNumberGenerator()
        let words = [generator.next(), generator.next()] as [UInt64]
        return "flow-"
            + words.map { word in
                let hex = String(word, radix: 16)
                return String(repeating: "0", count: 16 - hex.count) + hex
            }.joined()
    }
}
