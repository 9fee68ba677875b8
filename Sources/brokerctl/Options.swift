import ArgumentParser
import SharedDeviceClient

/// Options every command takes.
struct CommonOptions: ParsableArguments {
    @Option(help: "The D-Bus address of the bus brokerd is on (default: DBUS_SESSION_BUS_ADDRESS).")
    var address: String?

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func application(clientId: String) throws -> PublicClientApplication {
        try PublicClientApplication(clientId: clientId, configuration: BrokerClientConfiguration(busAddress: address))
    }
}

/// The app the command acts for.
struct ClientOptions: ParsableArguments {
    @Option(name: .customLong("client-id"), help: "The app's client id (its registration at the identity provider).")
    var clientId: String
}

/// Runs a command body, turning a broker error into its name, message and exit status 1.
func reportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as BrokerError {
        Output.error("\(error.errorName): \(error.message)")
        throw ExitCode(1)
    }
}
