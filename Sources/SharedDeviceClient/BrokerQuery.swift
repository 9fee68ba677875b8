import BrokerAPI
import DBus

/// A read-only question to the broker: the method, its arguments and how its reply reads.
/// ``PublicClientApplication`` asks these over its connection and ``OneShotQueries`` on a
/// connection of its own, so each question is marshalled in this one place; the replies are
/// read by the generated `Broker1Reply`.
struct BrokerQuery<Answer> {
    let call: Broker1Call
    let decode: ([DBusValue]) throws(BrokerError) -> Answer
}

extension BrokerQuery<DeviceInformation> {
    /// `GetDeviceInformation()`: the device is not an app's, so no clientId is sent.
    static var deviceInformation: Self {
        Self(call: .getDeviceInformation()) { reply throws(BrokerError) in
            try Broker1Reply.GetDeviceInformation(reply).information
        }
    }
}

extension BrokerQuery<SignInOptions> {
    /// `GetSignInOptions(clientId)`.
    static func signInOptions(clientId: String) -> Self {
        Self(call: .getSignInOptions(clientId: clientId)) { reply throws(BrokerError) in
            try Broker1Reply.GetSignInOptions(reply).options
        }
    }
}

extension BrokerQuery<(current: Account?, previous: Account?)> {
    /// `GetCurrentAccount(clientId)`: (current, previous).
    static func currentAccount(clientId: String) -> Self {
        Self(call: .getCurrentAccount(clientId: clientId)) { reply throws(BrokerError) in
            let accounts = try Broker1Reply.GetCurrentAccount(reply)
            return (accounts.current, accounts.previous)
        }
    }
}

extension BrokerQuery<[Account]> {
    /// `GetAccounts(clientId)`.
    static func accounts(clientId: String) -> Self {
        Self(call: .getAccounts(clientId: clientId)) { reply throws(BrokerError) in
            try Broker1Reply.GetAccounts(reply).accounts
        }
    }
}
