import BrokerAPI
import SharedDeviceClient

/// `device-info`, `current-account` and `accounts`: one question each, asked synchronously on a
/// connection of their own (``OneShotQueries``), without a connection thread or Swift concurrency.
///
/// Each returns the exit status: 0, or 1 after a broker error's name and message on standard error.
public enum PlainReads {
    public static func deviceInformation(address: String?, json: Bool) -> Int32 {
        reportingErrors { () throws(BrokerError) in
            // The device is not an app's: any clientId will do, it is not sent.
            let info = try queries(clientId: "brokerctl", address: address).deviceInformation()
            if json { return Output.json(info) }
            var rows = [
                ("Device mode", info.deviceMode.rawValue), ("Broker version", info.brokerVersion),
                ("Device id", info.deviceId), ("Tenant", info.tenantId.isEmpty ? "(not set)" : info.tenantId),
                ("Authority", info.authority),
                (
                    "Single sign-on",
                    describe(
                        info.singleSignOn, discoveryError: info.extraDeviceInformation[DeviceFact.discoveryError])
                ),
            ]
            rows += info.extraDeviceInformation.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            Output.fields(rows)
        }
    }

    public static func currentAccount(clientId: String, address: String?, json: Bool) -> Int32 {
        reportingErrors { () throws(BrokerError) in
            let (current, previous) = try queries(clientId: clientId, address: address).currentAccount()
            if json { return Output.json(CurrentAccountOutput(current: current, previous: previous)) }
            Output.fields([
                ("Current account", Output.account(current)), ("Previous account", Output.account(previous)),
            ])
            if current == nil, let previous {
                Output.line("Account \(Output.shown(previous.username)) has been signed out.")
            }
        }
    }

    public static func accounts(clientId: String, address: String?, json: Bool) -> Int32 {
        reportingErrors { () throws(BrokerError) in
            let accounts = try queries(clientId: clientId, address: address).accounts()
            if json { return Output.json(accounts) }
            if accounts.isEmpty { Output.line("No accounts.") }
            for account in accounts { Output.line(Output.account(account)) }
        }
    }

    /// The single sign-on the device offers, in words. Not known until the provider's discovery
    /// document is read: `discoveryError` is why that failed, when it did.
    public static func describe(_ singleSignOn: [SingleSignOnMechanism]?, discoveryError: String? = nil) -> String {
        guard let singleSignOn else {
            if let discoveryError, !discoveryError.isEmpty {
                return "unknown (the identity provider's discovery failed: \(discoveryError))"
            }
            return "unknown (the broker has not reached the identity provider yet)"
        }
        guard !singleSignOn.isEmpty else { return "none (each app signs in for itself)" }
        return Output.list(singleSignOn.map(\.rawValue))
    }

    private static func queries(clientId: String, address: String?) -> OneShotQueries {
        OneShotQueries(clientId: clientId, configuration: BrokerClientConfiguration(busAddress: address))
    }

    private static func reportingErrors(_ body: () throws(BrokerError) -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch {
            Output.brokerError(error)
            return 1
        }
    }
}
