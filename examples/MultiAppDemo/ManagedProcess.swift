import Foundation

/// A process the demo started: its output read line by line so the demo can wait (bounded) for a
/// line instead of sleeping, and its standard input kept open for commands.
final class ManagedProcess: @unchecked Sendable {
    let name: String
    private let process = Process()
    private let input = Pipe()
    private let condition = NSCondition()
    private var lines: [String] = []
    private var partial = ""
    private var exited = false
    /// Called with each new line of standard output (on a reader thread).
    private let onLine: @Sendable (String) -> Void

    init(
        _ name: String, executable: String, arguments: [String], environment: [String: String] = [:],
        stderrFile: String? = nil, onLine: @escaping @Sendable (String) -> Void = { _ in }
    ) throws {
        self.name = name
        self.onLine = onLine
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = input
        if let stderrFile {
            _ = FileManager.default.createFile(atPath: stderrFile, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: stderrFile)
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
        // Read on a thread of its own with blocking reads, until the end of the output (the exit):
        // Foundation's readabilityHandler can crash libdispatch when the pipe is torn down.
        Thread { [weak self] in
            let handle = output.fileHandleForReading
            while true {
                let data = handle.availableData
                guard !data.isEmpty, let self else { break }
                self.take(data)
            }
            guard let self else { return }
            self.condition.lock()
            self.exited = true
            self.condition.broadcast()
            self.condition.unlock()
        }.start()
        Cleanup.shared.register(self)
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }
    var output: [String] {
        condition.lock()
        defer { condition.unlock() }
        return lines
    }

    private func take(_ data: Data) {
        guard !data.isEmpty else { return }
        var complete: [String] = []
        condition.lock()
        var text = partial + String(decoding: data, as: UTF8.self)
        while let newline = text.firstIndex(of: "\n") {
            complete.append(String(text[..<newline]))
            text = String(text[text.index(after: newline)...])
        }
        partial = text
        lines += complete
        condition.broadcast()
        condition.unlock()
        complete.forEach(onLine)
    }

    /// Waits until a line of standard output (from line `from` on) satisfies `matches`; at most `timeout`.
    func waitForLine(from start: Int = 0, timeout: Double, _ matches: (String) -> Bool) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        var seen = min(start, lines.count)
        while true {
            if let line = lines[seen...].first(where: matches) { return line }
            seen = lines.count
            if exited {
                throw DemoFailure(
                    "\(name) exited (status \(process.terminationStatus)) before printing what the demo waited for")
            }
            if !condition.wait(until: deadline) {
                throw DemoFailure("\(name) did not print what the demo waited for within \(Int(timeout)) s")
            }
        }
    }

    /// Writes one line to its standard input.
    func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    /// Closes its standard input.
    func closeInput() { try? input.fileHandleForWriting.close() }

    /// Waits for it to exit, at most `timeout`; true when it did.
    @discardableResult
    func waitForExit(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !exited { if !condition.wait(until: deadline) { return false } }
        return true
    }

    /// SIGTERM, a bounded wait, then SIGKILL.
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        if !waitForExit(timeout: 3) {
            kill(process.processIdentifier, SIGKILL)
            waitForExit(timeout: 3)
        }
    }
}

/// Why the demo stopped early.
struct DemoFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
