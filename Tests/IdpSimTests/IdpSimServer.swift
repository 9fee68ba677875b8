import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization
import Testing

/// A running `idp-sim` child process, started from the built binary with its own users file and port.
final class IdpSimServer: Sendable {
    let baseURL: String
    let tenantId: String
    let process: Process
    let usersFile: URL

    var authority: String { "\(baseURL)/\(tenantId)/v2.0" }
    var tokenURL: String { authority + "/oauth2/v2.0/token" }

    static let defaultUsers = """
        {"tenantId": "11111111-2222-3333-4444-555555555555",
         "users": [
           {"username": "alice@contoso.test", "password": "Passw0rd!", "displayName": "Alice Example", "email": "alice@contoso.test"},
           {"username": "bob@contoso.test", "displayName": "Bob Otp", "email": "bob@contoso.test", "authMethods": ["emailOtp"]},
           {"username": "carol@contoso.test", "password": "Carol#1", "displayName": "Carol Both", "email": "carol@contoso.test",
            "id": "00000000-0000-0000-0000-0000000000c0", "authMethods": ["password", "emailOtp"]}
         ],
         "clients": [
           {"clientId": "broker-app", "redirectUris": ["http://127.0.0.1/callback"]},
           {"clientId": "conf-app", "clientSecret": "s3cret"}
         ]}
        """

    /// Finds the `idp-sim` binary: `IDP_SIM_PATH`, next to the test bundle, or in the package's build folders.
    static func binaryPath() throws -> String {
        let fileManager = FileManager.default
        if let path = ProcessInfo.processInfo.environment["IDP_SIM_PATH"], fileManager.isExecutableFile(atPath: path) {
            return path
        }
        var candidates: [String] = []
        for executable in [(try? fileManager.destinationOfSymbolicLink(atPath: "/proc/self/exe")), CommandLine.arguments.first] {
            guard let executable else { continue }
            var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
            // The test binary may sit inside a bundle directory (…/debug/X.xctest/…); walk up a few levels.
            for _ in 0..<4 {
                candidates.append(directory.appendingPathComponent("idp-sim").path)
                directory = directory.deletingLastPathComponent()
            }
        }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        for scratch in [".build-idp", ".build"] {
            candidates.append(packageRoot.appendingPathComponent("\(scratch)/debug/idp-sim").path)
        }
        if let found = candidates.first(where: { fileManager.isExecutableFile(atPath: $0) }) { return found }
        throw TestFailure("idp-sim binary not found; build it with `swift build --product idp-sim` or set IDP_SIM_PATH (looked in \(candidates))")
    }

    private init(baseURL: String, tenantId: String, process: Process, usersFile: URL) {
        self.baseURL = baseURL
        self.tenantId = tenantId
        self.process = process
        self.usersFile = usersFile
    }

    /// Writes a users file, starts the binary and waits (at most `timeout`) for `listening on …`.
    /// Waiting polls instead of blocking, so parallel tests do not starve the cooperative thread pool.
    static func start(users: String = IdpSimServer.defaultUsers, arguments: [String] = [], timeout: TimeInterval = 30) async throws -> IdpSimServer {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("idp-sim-users-\(UUID().uuidString).json")
        try Data(users.utf8).write(to: file)
        let tenant = (try? JSONSerialization.jsonObject(with: Data(users.utf8)) as? [String: Any])?["tenantId"] as? String

        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binaryPath())
        process.arguments = ["--port", "0", "--users", file.path, "--log-level", "warning"] + arguments
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()

        let line = Mutex<String?>(nil)
        let handle = stdout.fileHandleForReading
        // Drains stdout on a thread of its own for the life of the process: a blocking read on a
        // Dispatch worker would take a thread from the pool Swift's tasks run on (libdispatch adds
        // about one worker a second), stalling every test in the process.
        Thread {
            var buffer = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                if let text = String(data: buffer, encoding: .utf8),
                   let found = text.split(separator: "\n").first(where: { $0.hasPrefix("listening on ") }) {
                    line.withLock { if $0 == nil { $0 = String(found) } }
                }
            }
        }.start()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let announced = line.withLock({ $0 }) {
                return IdpSimServer(baseURL: String(announced.dropFirst("listening on ".count)), tenantId: tenant ?? "",
                                    process: process, usersFile: file)
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.terminate()
        try? FileManager.default.removeItem(at: file)
        throw TestFailure("idp-sim did not print `listening on` within \(timeout) s")
    }

    deinit {
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(at: usersFile)
    }

    func stop() -> Int32 {
        process.terminate()
        process.waitUntilExit()
        return process.terminationStatus
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
