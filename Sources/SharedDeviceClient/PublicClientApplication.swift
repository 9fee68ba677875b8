import BrokerAPI
import DBus
import Logging

/// How an app reaches the broker.
public struct BrokerClientConfiguration: Sendable {
    /// The bus to use; nil means the session bus (`DBUS_SESSION_BUS_ADDRESS`).
    public var busAddress: String?
    /// For queries (device information, current account, accounts).
    public var queryTimeout: Duration
    /// For sign-in and token calls, which may wait for the identity provider.
    public var tokenTimeout: Duration
    /// For interactive sign-in, which waits for a person.
    public var interactiveTimeout: Duration

    /// The defaults: the session bus, 10 s for queries, 60 s for tokens, 10 min for interaction.
    public init(busAddress: String? = nil, queryTimeout: Duration = .seconds(10),
                tokenTimeout: Duration = .seconds(60), interactiveTimeout: Duration = .seconds(600)) {
        self.busAddress = busAddress
        self.queryTimeout = queryTimeout
        self.tokenTimeout = tokenTimeout
        self.interactiveTimeout = interactiveTimeout
    }
}

/// An app's handle on the shared-device broker, in the shape of MSAL's
/// `MSALPublicClientApplication`: one per app (clientId), one bus connection each, safe to use
/// from any task.
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
    private let connection: DBusConnection

    /// Connects to the bus. The broker itself is reached on the first call (and may be
    /// started by D-Bus activation then).
    public init(clientId: String, configuration: BrokerClientConfiguration = BrokerClientConfiguration()) throws(BrokerError) {
        self.clientId = clientId
        self.configuration = configuration
        let logger = Logger(label: "shared-device-client")
        do {
            connection = try configuration.busAddress.map { try DBusConnection(address: $0, logger: logger) }
                ?? DBusConnection.sessionBus(logger: logger)
        } catch let error as DBusError {
            throw BrokerError.brokerUnavailable("cannot connect to the bus: \(error.message)")
        } catch {
            throw BrokerError.brokerUnavailable("cannot connect to the bus: \(error)")
        }
    }

    deinit { connection.close() }

    /// The device's mode and facts (MSAL: `getDeviceInformation`).
    public func deviceInformation() async throws(BrokerError) -> DeviceInformation {
        try ReplyDecoding.deviceInformation(try await call("GetDeviceInformation", [], timeout: configuration.queryTimeout).first)
    }

    /// The account signed in now and the one this app saw on its previous call (MSAL:
    /// `getCurrentAccount`). After a sign-out elsewhere: (nil, the user) once, then (nil, nil).
    public func currentAccount() async throws(BrokerError) -> (current: Account?, previous: Account?) {
        let reply = try await call("GetCurrentAccount", [.string(clientId)], timeout: configuration.queryTimeout)
        guard reply.count == 2 else { throw ReplyDecoding.malformed("GetCurrentAccount did not return two accounts") }
        return (try ReplyDecoding.account(reply[0]), try ReplyDecoding.account(reply[1]))
    }

    /// The accounts this app can use: in shared mode, the device's one account.
    public func accounts() async throws(BrokerError) -> [Account] {
        let reply = try await call("GetAccounts", [.string(clientId)], timeout: configuration.queryTimeout)
        guard let list = reply.first?.vardictArray else { throw ReplyDecoding.malformed("GetAccounts did not return aa{sv}") }
        var accounts: [Account] = []
        for dict in list {
            if let account = try ReplyDecoding.account(.vardict(dict)) { accounts.append(account) }
        }
        return accounts
    }

    /// Signs in with a username and password (the provider's native password path or the
    /// resource-owner password grant).
    public func signIn(username: String, password: String, scopes: [String]) async throws(BrokerError) -> TokenResult {
        try ReplyDecoding.tokenResult(try await call(
            "SignInWithPassword", [.string(clientId), .string(username), .string(password), .strings(scopes)],
            timeout: configuration.tokenTimeout).first)
    }

    /// A token without user interaction: from the cache, or with the refresh token.
    /// Throws ``BrokerError/interactionRequired(_:)`` when neither works.
    public func acquireTokenSilent(_ parameters: SilentTokenParameters) async throws(BrokerError) -> TokenResult {
        try ReplyDecoding.tokenResult(try await call(
            "AcquireTokenSilent",
            [.string(clientId), .strings(parameters.scopes), .string(parameters.account?.identifier ?? ""),
             .vardict([OptionKey.forceRefresh: .bool(parameters.forceRefresh)])],
            timeout: configuration.tokenTimeout).first)
    }

    /// Signs out. In shared mode this signs the whole device out, and every app hears of it.
    public func signOut(account: Account?, parameters: SignoutParameters = SignoutParameters()) async throws(BrokerError) {
        _ = try await call(
            "SignOut",
            [.string(clientId), .string(account?.identifier ?? ""),
             .vardict([OptionKey.signoutFromBrowser: .bool(parameters.signoutFromBrowser)])],
            timeout: configuration.tokenTimeout)
    }

    /// Every change of the device's account, as it happens (the `AccountChanged` signal).
    /// Subscribes when iteration starts; use ``subscribeToAccountChanges()`` to know the
    /// subscription is in place before going on. Ends when the iterating task is cancelled.
    public var accountChanges: AsyncThrowingStream<AccountChange, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await change in try await self.subscribeToAccountChanges() { continuation.yield(change) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Subscribes to `AccountChanged` and returns once the bus delivers it to this app: no
    /// change after this returns is missed.
    public func subscribeToAccountChanges() async throws(BrokerError) -> AsyncThrowingStream<AccountChange, any Error> {
        let signals: AsyncStream<DBusSignal>
        do {
            signals = try await connection.signals(matching: DBusMatchRule(
                sender: BrokerNames.busName, path: BrokerNames.objectPath,
                interface: BrokerNames.interface, member: BrokerNames.accountChangedSignal))
        } catch let error as DBusError {
            throw BrokerError(error)
        } catch {
            throw BrokerError.dbus(name: "org.freedesktop.DBus.Error.Failed", message: "\(error)")
        }
        return AsyncThrowingStream { continuation in
            let task = Task {
                for await signal in signals {
                    do { continuation.yield(try ReplyDecoding.accountChange(signal.arguments)) } catch {
                        continuation.finish(throwing: error)
                        return
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    private func call(_ member: String, _ arguments: [DBusValue], timeout: Duration) async throws(BrokerError) -> [DBusValue] {
        do {
            return try await connection.call(destination: BrokerNames.busName, path: BrokerNames.objectPath,
                                             interface: BrokerNames.interface, member: member,
                                             arguments: arguments, timeout: timeout)
        } catch let error as DBusError {
            throw BrokerError(error)
        } catch is CancellationError {
            throw BrokerError.cancelled("the call was cancelled")
        } catch {
            throw BrokerError.dbus(name: "org.freedesktop.DBus.Error.Failed", message: "\(error)")
        }
    }
}
