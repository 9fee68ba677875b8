import Foundation

/// How a finished command ended, and what it printed.
package struct CommandResult: Sendable {
    package var status: Int32
    package var stdout: String
    package var stderr: String

    package init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }
}

/// Runs `executable` to completion, at most `timeout`, on a thread of its own (see ``offThePool(_:)``).
package func runCommand(
    _ executable: String, _ arguments: [String], stdin: String? = nil,
    timeout: Duration = .seconds(30)
) async throws -> CommandResult {
    try await offThePool {
        let process = try ChildProcess(
            URL(fileURLWithPath: executable).lastPathComponent, executable: executable,
            arguments: arguments, stdin: stdin)
        let status = try process.waitForExit(timeout: timeout)
        return CommandResult(status: status, stdout: process.stdoutText, stderr: process.stderrText)
    }
}
