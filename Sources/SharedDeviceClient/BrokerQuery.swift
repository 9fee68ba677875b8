import BrokerAPI
import DBus

/// A read-only question to the broker: the method, its arguments and how its reply reads.
/// ``PublicClientApplication`` asks these over its connection and ``OneShotQueries`` on a
/// connection of its own, so each question is marshalled in this one place.
struct BrokerQuery<Answer> {
    let call: Broker1Call
    let decode: ([DBusValue]) throws(BrokerError) -> Answer
}

extension BrokerQuery<DeviceInformation> {
    /// `GetDeviceInformation()`: the device is not an app's, so no clientId is sent.
    static var deviceInformation: Self {
        Self(call: .getDeviceInformation()) { reply throws(BrokerError) in
            try ReplyDecoding.deviceInformation(reply.first)
        }
    }
}

extension BrokerQuery<SignInOptions> {
    /// `GetSignInOptions(clientId)`.
    static func signInOptions(clientId: String) -> Self {
        Self(call: .getSignInOptions(clientId: clientId)) { reply throws(BrokerError) in
            try ReplyDecoding.signInOptions(reply.first)
        }
    }
}

extension BrokerQuery<(current: Account?, previous: Account?)> {
    /// `GetCurrentAccount(clientId)`: (current, previous).
    static func currentAccount(clientId: String) -> Self {
        Self(call: .getCurrentAccount(clientId: clientId)) { reply throws(BrokerError) in
            guard reply.count == 2 else {
                throw ReplyDecoding.malformed("\(Broker1Method.getCurrentAccount.rawValue) did not return two accounts")
            }
            return (try ReplyDecoding.account(reply[0]), try ReplyDecoding.account(reply[1]))
        }
    }
}

extension BrokerQuery<[Account]> {
    /// `GetAccounts(clientId)`.
    static func accounts(clientId: String) -> Self {
        Self(call: .getAccounts(clientId: clientId)) { reply throws(BrokerError) in
            try ReplyDecoding.accounts(reply.first)
        }
    }
}
