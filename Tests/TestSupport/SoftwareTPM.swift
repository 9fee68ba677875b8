import Foundation

/// A TPM 2.0 simulator (`swtpm socket`) of its own, on two free loopback ports, its state in a
/// temporary directory: a "machine" with its own TPM. Two instances are two machines (their storage
/// keys differ). Stopped when released.
package final class SoftwareTPM: @unchecked Sendable {
    /// The command port; the control port is the next one, as tpm2-tss's swtpm TCTI expects.
    package let port: UInt16
    private let state: TemporaryDirectory
    private let process: ChildProcess

    /// The TCTI configuration that reaches it.
    package var tcti: String { "swtpm:host=127.0.0.1,port=\(port)" }

    /// Starts swtpm and returns once it accepts connections, at most `timeout`.
    package init(timeout: Duration = .seconds(20)) throws {
        guard
            let swtpm = ["/usr/bin/swtpm", "/usr/local/bin/swtpm"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            throw ProcessFailure("swtpm is not installed (Debian: apt install swtpm swtpm-tools; `make deps` does)")
        }
        state = try TemporaryDirectory()
        // Two free ports in a row: free when checked, so another program may take one before swtpm
        // binds it; swtpm then exits at once, and the next pair is tried.
        var lastFailure = ""
        for _ in 0..<8 {
            guard let port = FreePorts.pair() else { continue }
            let process = try ChildProcess(
                "swtpm", executable: swtpm,
                arguments: [
                    "socket", "--tpm2",
                    "--server", "type=tcp,port=\(port),bindaddr=127.0.0.1",
                    "--ctrl", "type=tcp,port=\(port + 1),bindaddr=127.0.0.1",
                    "--tpmstate", "dir=\(state.path)",
                    "--flags", "not-need-init,startup-clear",
                ])
            if Self.waitUntilListening(port, process: process, timeout: timeout) {
                self.port = port
                self.process = process
                return
            }
            process.kill()
            lastFailure = process.allOutput
        }
        throw ProcessFailure("swtpm did not start: \(lastFailure)")
    }

    deinit { stop() }

    /// Stops swtpm (its state stays until the instance is released).
    package func stop() {
        process.signal(SIGTERM)
        if (try? process.waitForExit(timeout: .seconds(5))) == nil { process.kill() }
    }

    /// Polls the command port until it accepts a connection, at most `timeout`; false when swtpm
    /// exited first (its port was taken) or the time ran out. swtpm prints no readiness line.
    private static func waitUntilListening(_ port: UInt16, process: ChildProcess, timeout: Duration) -> Bool {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        while Date() < deadline {
            if let fd = LoopbackHTTP.connect(port) {
                close(fd)
                return true
            }
            guard process.isRunning else { return false }
            usleep(10_000)
        }
        return false
    }
}
