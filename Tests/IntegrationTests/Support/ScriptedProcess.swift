import Foundation

/// A process driven line by line: like `ChildProcess`, but its standard input stays open so a
/// test can send a command, wait (bounded) for the answer, act elsewhere, and send the next.
final class ScriptedProcess: @unchecked Sendable {
    let name: String
    private let process = Process()
    private let input = Pipe()
    private let state = NSCondition()
    private var lines: [String] = []
    private var errorLines: [String] = []
    private var partial = ["", ""]
    private var exited = false

    init(_ name: String, executable: String, arguments: [String], environment: [String: String] = [:]) throws {
        self.name = name
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let outPipe = Pipe(), errPipe = Pipe()
        process.standardOutput = outPipe
        process.standardError = errPipe
        process.standardInput = input
        outPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in self?.take(handle.availableData, stream: 0) }
        errPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in self?.take(handle.availableData, stream: 1) }
        process.terminationHandler = { [weak self] _ in
            guard let self else { return }
            self.take(outPipe.fileHandleForReading.readDataToEndOfFile(), stream: 0)
            self.take(errPipe.fileHandleForReading.readDataToEndOfFile(), stream: 1)
            outPipe.fileHandleForReading.readabilityHandler = nil
            errPipe.fileHandleForReading.readabilityHandler = nil
            self.state.lock()
            self.exited = true
            self.state.broadcast()
            self.state.unlock()
        }
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Everything printed on standard output so far.
    var stdoutLines: [String] { state.withLock { lines } }
    /// Both streams, for failure messages.
    var allOutput: String { state.withLock { (lines + errorLines).joined(separator: "\n") } }
    /// How many lines standard output has so far: a mark for ``waitForLine(after:timeout:_:)``.
    var mark: Int { state.withLock { lines.count } }

    private func take(_ data: Data, stream: Int) {
        guard !data.isEmpty else { return }
        state.lock()
        defer { state.unlock() }
        var text = partial[stream] + String(decoding: data, as: UTF8.self)
        while let newline = text.firstIndex(of: "\n") {
            let line = String(text[..<newline])
            if stream == 0 { lines.append(line) } else { errorLines.append(line) }
            text = String(text[text.index(after: newline)...])
        }
        partial[stream] = text
        state.broadcast()
    }

    /// Sends one line to standard input.
    func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

    /// Waits until a line of standard output after `mark` satisfies `matches`, at most `timeout`.
    @discardableResult
    func waitForLine(after mark: Int = 0, timeout: Duration = .seconds(15), _ matches: (String) -> Bool) throws -> String {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        state.lock()
        defer { state.unlock() }
        var seen = min(mark, lines.count)
        while true {
            if let line = lines[seen...].first(where: matches) { return line }
            seen = lines.count
            if exited { throw ProcessFailure("\(name) exited without the expected line; output:\n\((lines + errorLines).joined(separator: "\n"))") }
            if !state.wait(until: deadline) {
                throw ProcessFailure("\(name) did not print the expected line within \(timeout); output:\n\((lines + errorLines).joined(separator: "\n"))")
            }
        }
    }

    /// Closes standard input and waits for the exit, at most `timeout`; returns the status.
    @discardableResult
    func finish(timeout: Duration = .seconds(10)) throws -> Int32 {
        try? input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(timeout.seconds)
        state.lock()
        defer { state.unlock() }
        while !exited {
            if !state.wait(until: deadline) { throw ProcessFailure("\(name) did not exit within \(timeout)") }
        }
        return process.terminationStatus
    }
}
