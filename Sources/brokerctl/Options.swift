import ArgumentParser
import Dispatch
import SharedDeviceClient

/// Options every command takes.
struct CommonOptions: ParsableArguments {
    @Option(help: "The D-Bus address of the bus brokerd is on (default: DBUS_SESSION_BUS_ADDRESS).")
    var address: String?

    @Flag(help: "Print JSON instead of text.")
    var json = false

    var configuration: BrokerClientConfiguration { BrokerClientConfiguration(busAddress: address) }

    /// For commands that talk with the broker over time (sign-in, tokens, sign-out, watch).
    func application(clientId: String) throws -> PublicClientApplication {
        try PublicClientApplication(clientId: clientId, configuration: configuration)
    }
}

/// The app the command acts for.
struct ClientOptions: ParsableArguments {
    @Option(name: .customLong("client-id"), help: "The app's client id (its registration at the identity provider).")
    var clientId: String
}

/// A command whose work needs Swift concurrency (a sign-in, a token, a stream of changes).
///
/// brokerctl's entry point is synchronous, so that the commands that ask one question never start
/// Swift concurrency's threads (most of such a run's cost); these commands start it in `run()`:
/// `runAsync()` runs in a task while the main thread waits for it.
protocol AsyncCommand: ParsableCommand, Sendable {
    func runAsync() async throws
}

extension AsyncCommand {
    func run() throws {
        let outcome = Outcome()
        Task.detached { [self] in
            do { try await runAsync() } catch { outcome.error = error }
            outcome.finished.signal()
        }
        outcome.finished.wait()
        if let error = outcome.error { throw error }
    }
}

/// How an `AsyncCommand`'s task ended: `error` is written by the task before it signals
/// `finished`, and read by the waiting thread after it, never at the same time.
private final class Outcome: @unchecked Sendable {
    let finished = DispatchSemaphore(value: 0)
    var error: (any Error)?
}

/// Runs a command body, turning a broker error into its name, message and exit status 1 (the
/// synchronous commands are ``PlainReads``, which report theirs the same way).
func reportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as BrokerError {
        Output.brokerError(error)
        throw ExitCode(1)
    }
}

/// A ``PlainReads`` status as the command's exit: nothing for 0, else that status (the error is
/// already printed).
func exitOnFailure(_ status: Int32) throws {
    if status != 0 { throw ExitCode(status) }
}
