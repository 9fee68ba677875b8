/// The broker's read-only questions (device information, current account, accounts), each asked
/// synchronously on a bus connection of its own that closes with the answer: for command-line
/// tools and scripts that ask once and exit.
///
/// Unlike ``PublicClientApplication`` it starts no thread and needs no Swift concurrency, which
/// is most of the cost of such a short run; the answers and the ``BrokerError``s are the same.
/// Each call blocks the calling thread for a connection handshake and one round trip (bounded by
/// `configuration.queryTimeout`), so an app that asks more than once, or from async code, uses
/// ``PublicClientApplication``.
///
/// ```swift
/// let info = try OneShotQueries(clientId: "my-tool").deviceInformation()
/// ```
public struct OneShotQueries: Sendable {
    /// The app the questions are asked for (``currentAccount()`` moves its previous account).
    public let clientId: String
    /// How the broker is reached; `queryTimeout` bounds each answer.
    public let configuration: BrokerClientConfiguration

    /// Connects to nothing yet: each question opens its own connection.
    public init(clientId: String, configuration: BrokerClientConfiguration = BrokerClientConfiguration()) {
        self.clientId = clientId
        self.configuration = configuration
    }

    /// As ``PublicClientApplication/deviceInformation()``.
    public func deviceInformation() throws(BrokerError) -> DeviceInformation {
        try ask(.deviceInformation)
    }

    /// As ``PublicClientApplication/currentAccount()``.
    public func currentAccount() throws(BrokerError) -> (current: Account?, previous: Account?) {
        try ask(.currentAccount(clientId: clientId))
    }

    /// As ``PublicClientApplication/accounts()``.
    public func accounts() throws(BrokerError) -> [Account] {
        try ask(.accounts(clientId: clientId))
    }

    private func ask<Answer>(_ query: BrokerQuery<Answer>) throws(BrokerError) -> Answer {
        try BusLink.askOnce(query, address: configuration.busAddress, timeout: configuration.queryTimeout)
    }
}
