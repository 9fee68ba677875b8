import Foundation

/// A real process started by a test, with its output captured line by line so a test can wait
/// (bounded) for a readiness line instead of sleeping. Killed when the test is done with it.
package final class ChildProcess: @unchecked Sendable {
    package let name: String
    package let pid: Int32
    private let state = NSCondition()
    /// The exit status, once the process has ended (128 + N when signal N killed it).
    private var status: Int32 = 0
    private var stdout: [String] = []
    private var stderr: [String] = []
    private var partial = ["", ""]
    /// The process has ended.
    private var terminated = false
    /// Each output stream has reached its end (every writer, grandchildren too, closed it).
    private var ended = [false, false]
    /// When the process ended; its output is awaited a little longer, for what is still in the pipes.
    private var terminatedAt: Date?
    /// The process has ended and its output is in (or stopped coming a second after the end:
    /// a grandchild may hold the pipes open).
    private var exited: Bool {
        guard terminated else { return false }
        if ended[0] && ended[1] { return true }
        if terminatedAt == nil { terminatedAt = Date() }
        return Date().timeIntervalSince(terminatedAt ?? Date()) > 1
    }
    /// Standard input, while the test keeps it open to type into.
    private var input: FileHandle?

    /// `XDG_STATE_HOME` for every child of this test run, unless a test gives its own.
    package static let testStateHome: String = {
        let path = NSTemporaryDirectory() + "shared-device-broker-tests-\(getpid())/state"
        try? FileManager.default.createDirectory(
            atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return path
    }()

    /// Starts `executable` with `arguments`. Standard input gets `stdin` and is closed, unless
    /// `keepStdinOpen`: then the test types lines with ``type(_:)`` and ends them with ``closeStdin()``.
    package init(
        _ name: String, executable: String, arguments: [String], environment: [String: String] = [:],
        stdin: String? = nil, keepStdinOpen: Bool = false
    ) throws {
        self.name = name
        var env = ProcessInfo.processInfo.environment
        // Never the developer's own bus: a test names its bus explicitly.
        env["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"
        // Nor the developer's own state directory: a brokerd that fails to start leaves why there.
        env["XDG_STATE_HOME"] = Self.testStateHome
        for (key, value) in environment { env[key] = value }
        let child = try Spawned.start(executable, arguments: arguments, environment: env)
        pid = child.pid
        // Output is read, and the exit awaited, on threads of their own with plain blocking calls:
        // Foundation's readabilityHandler can crash libdispatch when a pipe is torn down while a
        // handler runs, and a wait on a Dispatch worker would take a thread from the pool tests run on.
        Thread { [weak self] in
            let status = child.waitForStatus()
            guard let self else { return }
            self.state.withLock {
                self.status = status
                self.terminated = true
                self.state.broadcast()
            }
        }.start()
        for (stream, descriptor) in [(0, child.output), (1, child.error)] {
            Thread { [weak self] in
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
                    if count < 0 && errno == EINTR { continue }
                    guard count > 0, let self else { break }
                    self.take(Data(buffer[..<count]), stream: stream)
                }
                close(descriptor)
                self?.state.withLock {
                    self?.ended[stream] = true
                    self?.state.broadcast()
                }
            }.start()
        }
        let input = FileHandle(fileDescriptor: child.input, closeOnDealloc: true)
        if let stdin { input.write(Data(stdin.utf8)) }
        if keepStdinOpen {
            self.input = input
        } else {
            try? input.close()
        }
    }

    /// Writes one line to the process's standard input, as a person typing it.
    package func type(_ line: String) throws {
        _ = Self.brokenPipesAreErrors
        guard let input = state.withLock({ self.input }) else {
            throw ProcessFailure("\(name)'s standard input is closed")
        }
        try input.write(contentsOf: Data((line + "\n").utf8))
    }

    /// A write to a process that has exited fails instead of killing the test runner with SIGPIPE.
    private static let brokenPipesAreErrors: Void = { _ = Foundation.signal(SIGPIPE, SIG_IGN) }()

    /// Ends standard input and waits for the exit, at most `timeout`; returns the status.
    @discardableResult
    package func finish(timeout: Duration = .seconds(10)) throws -> Int32 {
        closeStdin()
        return try waitForExit(timeout: timeout)
    }

    /// Ends the process's standard input (end of file).
    package func closeStdin() {
        let handle = state.withLock { () -> FileHandle? in
            defer { input = nil }
            return input
        }
        try? handle?.close()
    }

    /// Kills a process still running; its own thread reaps it (no wait here: the waiting thread
    /// no longer reaches this object, and a test's thread should not be held up).
    deinit {
        if !terminated { Foundation.kill(pid, SIGKILL) }
    }

    package var isRunning: Bool { state.withLock { !terminated } }
    package var stdoutLines: [String] { state.withLock { stdout + (partial[0].isEmpty ? [] : [partial[0]]) } }
    package var stderrLines: [String] { state.withLock { stderr + (partial[1].isEmpty ? [] : [partial[1]]) } }
    package var stdoutText: String { stdoutLines.joined(separator: "\n") }
    package var stderrText: String { stderrLines.joined(separator: "\n") }
    /// Everything the process printed, both streams.
    package var allOutput: String { stdoutText + "\n" + stderrText }

    private func take(_ data: Data, stream: Int) {
        guard !data.isEmpty else { return }
        state.lock()
        defer { state.unlock() }
        var text = partial[stream] + String(decoding: data, as: UTF8.self)
        while let newline = text.firstIndex(of: "\n") {
            let line = String(text[..<newline])
            if stream == 0 { stdout.append(line) } else { stderr.append(line) }
            text = String(text[text.index(after: newline)...])
        }
        partial[stream] = text
        state.broadcast()
    }

    /// How many lines standard output has so far: a mark for ``waitForLine(after:timeout:stderr:skipping:_:)``.
    package var mark: Int { state.withLock { stdout.count } }

    /// Waits until a line of standard output (or error) satisfies `matches`, at most `timeout`;
    /// returns it. Only lines from `after` on count (a ``mark`` taken before sending a command);
    /// `skipping` passes over that many earlier matching lines (the second prompt, ...).
    @discardableResult
    package func waitForLine(
        after: Int = 0, timeout: Duration = .seconds(30), stderr useStderr: Bool = false, skipping: Int = 0,
        _ matches: (String) -> Bool
    ) throws -> String {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        state.lock()
        defer { state.unlock() }
        var seen = min(after, useStderr ? stderr.count : stdout.count)
        var toSkip = skipping
        while true {
            let lines = useStderr ? stderr : stdout
            for line in lines[seen...] where matches(line) {
                if toSkip == 0 { return line }
                toSkip -= 1
            }
            seen = lines.count
            if exited {
                throw ProcessFailure(
                    "\(name) exited (status \(status)) without the expected line; "
                        + "output:\n\(stdout.joined(separator: "\n"))\n\(stderr.joined(separator: "\n"))"
                )
            }
            if !waitForChange(until: deadline) {
                throw ProcessFailure(
                    "\(name) did not print the expected line within \(timeout); "
                        + "output:\n\(stdout.joined(separator: "\n"))\n\(stderr.joined(separator: "\n"))"
                )
            }
        }
    }

    /// Waits (lock held) for news from the readers or the exit; false once `deadline` has passed.
    /// After the exit, wakes every 100 ms: the output's end may never be announced.
    private func waitForChange(until deadline: Date) -> Bool {
        let step = terminated ? min(deadline, Date().addingTimeInterval(0.1)) : deadline
        return state.wait(until: step) || Date() < deadline
    }

    /// Waits for the process to exit, at most `timeout`; returns its status.
    @discardableResult
    package func waitForExit(timeout: Duration = .seconds(30)) throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout.seconds)
        state.lock()
        defer { state.unlock() }
        while !exited {
            if !waitForChange(until: deadline) {
                throw ProcessFailure(
                    "\(name) did not exit within \(timeout); "
                        + "output:\n\(stdout.joined(separator: "\n"))\n\(stderr.joined(separator: "\n"))"
                )
            }
        }
        return status
    }

    package func signal(_ number: Int32) {
        if isRunning { Foundation.kill(pid, number) }
    }

    /// SIGKILL, and waits (bounded) until the exit is reaped.
    package func kill() {
        guard isRunning else { return }
        Foundation.kill(pid, SIGKILL)
        let deadline = Date().addingTimeInterval(10)
        state.withLock {
            while !terminated, state.wait(until: deadline) {}
        }
    }
}

extension NSCondition {
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

package struct ProcessFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

extension Duration {
    package var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
