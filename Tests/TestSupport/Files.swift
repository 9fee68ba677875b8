import Foundation

/// Where the package's built executables are: beside the test bundle (or `BROKER_BIN_DIR`).
package enum Binaries {
    package static let directory: String = {
        if let dir = ProcessInfo.processInfo.environment["BROKER_BIN_DIR"] { return dir }
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: exe).deletingLastPathComponent().path
    }()

    package static func path(_ name: String) -> String { directory + "/" + name }
}

/// A temporary directory, removed at the end.
package final class TemporaryDirectory: @unchecked Sendable {
    package let path: String

    package init() throws {
        var template = Array((NSTemporaryDirectory() + "sdb-test-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw ProcessFailure("mkdtemp failed") }
        path = String(cString: made)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Writes `name` with mode 0644 whatever the umask: brokerd refuses a `--config` its group can
    /// write, as a umask of 002 would leave it.
    package func write(_ name: String, _ text: String) throws -> String {
        let file = path + "/" + name
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        guard chmod(file, 0o644) == 0 else { throw ProcessFailure("cannot chmod \(file)") }
        return file
    }
}

/// Copies the executable `source` to `destination` by running `cp`, for a test that then runs
/// the copy: a copy written by the test process would leave its descriptor open for writing in
/// any child another test forks meanwhile, and running the copy would then fail with ETXTBSY
/// ("text file busy"). Mode and all, as `cp` copies them.
package func copyExecutable(_ source: String, to destination: String) throws {
    let copy = try ChildProcess("cp", executable: "/bin/cp", arguments: [source, destination])
    guard try copy.waitForExit(timeout: .seconds(30)) == 0 else {
        throw ProcessFailure("cp \(source) \(destination): \(copy.stderrText)")
    }
}
