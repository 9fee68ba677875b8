import Foundation

/// A running `idp-sim` on a free loopback port.
package final class IdpSim: @unchecked Sendable {
    package let baseURL: String
    package let authority: String
    package let process: ChildProcess

    /// Starts idp-sim with the users file `users` (JSON, see idp-sim's README) whose directory is
    /// `tenant`, and waits for its `listening on` line.
    package init(
        in directory: TemporaryDirectory, users usersFile: String, tenant: String, extraArguments: [String] = []
    ) throws {
        let users = try directory.write("users.json", usersFile)
        process = try ChildProcess(
            "idp-sim", executable: Binaries.path("idp-sim"),
            arguments: ["--port", "0", "--users", users] + extraArguments)
        let line = try process.waitForLine(timeout: .seconds(30)) { $0.hasPrefix("listening on ") }
        baseURL = String(line.dropFirst("listening on ".count)).trimmingCharacters(in: .whitespaces)
        authority = "\(baseURL)/\(tenant)/v2.0"
    }
}
