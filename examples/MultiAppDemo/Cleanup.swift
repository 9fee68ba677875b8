import ExampleSupport
import Foundation

/// Every process the demo started, stopped (newest first) on every way out: the normal end, a
/// failure, or SIGINT/SIGTERM/SIGHUP (Ctrl-C).
final class Cleanup: @unchecked Sendable {
    static let shared = Cleanup()
    private let lock = NSLock()
    private var processes: [ManagedProcess] = []
    private var cleaned = false
    private var signalSources: [any DispatchSourceSignal] = []
    /// Removed at the end.
    var temporaryDirectory: String?

    func register(_ process: ManagedProcess) { lock.withLock { processes.append(process) } }

    /// Stops everything once; later calls do nothing.
    func run() {
        let toStop: [ManagedProcess] = lock.withLock {
            if cleaned { return [] }
            cleaned = true
            return processes.reversed()
        }
        for process in toStop { process.stop() }
        if let temporaryDirectory { try? FileManager.default.removeItem(atPath: temporaryDirectory) }
    }

    /// On SIGINT, SIGTERM or SIGHUP: clean up and exit 130.
    func installSignalHandlers() {
        for number in [SIGINT, SIGTERM, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                emit("[demo] interrupted: stopping everything it started")
                Cleanup.shared.run()
                exit(130)
            }
            source.resume()
            lock.withLock { signalSources.append(source) }
        }
    }
}
