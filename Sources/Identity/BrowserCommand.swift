import Glibc
import Locking
import TextRules

/// Opens a URL by starting a browser command: `$BROWSER` when set (the convention: a
/// colon-separated list of commands, `%s` standing for the URL), `xdg-open` otherwise.
///
/// Under systemd (`INVOCATION_ID` set) the command is started through `systemd-run --user`, as
/// a unit of its own: a browser started as brokerd's child would inherit the service's sandbox
/// (`MemoryDenyWriteExecute=` stops its JavaScript JIT, `RestrictNamespaces=` its own sandbox)
/// and be stopped with the service.
public struct BrowserCommand: URLOpener {
    /// `$BROWSER`'s first command, or nil for `xdg-open`.
    let browser: String?
    /// The `systemd-run` to start it through, or nil to start it as a child.
    let systemdRun: String?
    /// How long a command that fails at once (no browser for the URL) is waited for.
    let quickFailure: Duration

    /// The command for this process's environment.
    public init(quickFailure: Duration = .seconds(1)) {
        let environment = { (name: String) in getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        browser = environment("BROWSER").flatMap { $0.split(separator: ":").first.map(String.init) }
        systemdRun = environment("INVOCATION_ID") == nil ? nil : Self.findInPath("systemd-run")
        self.quickFailure = quickFailure
    }

    /// The words to run for `url`.
    func command(for url: String) -> [String] {
        let open: [String]
        if let browser {
            let words = browser.split(separator: " ").map(String.init)
            open = words.contains { $0.contains("%s") } ? words.map { $0.replacing("%s", with: url) } : words + [url]
        } else {
            open = ["xdg-open", url]
        }
        guard let systemdRun else { return open }
        return [systemdRun, "--user", "--quiet", "--collect", "--"] + open
    }

    /// Starts the command and returns once it is running (or ended well) for `quickFailure`; a
    /// command that ends with a failure sooner (xdg-open finding no browser) is reported, with
    /// what it wrote.
    ///
    /// The command's output never goes to brokerd's own (the journal) as it is: it is read, and
    /// only the start of a failing command's output goes into the error, escaped and without any
    /// URL query (``quoted(_:)``).
    public func open(_ url: String) async throws(IdentityError) {
        let command = command(for: url)
        let name = command[0]
        let started: (pid: pid_t, output: Int32)
        do { started = try Self.spawn(command) } catch {
            throw .browserUnavailable("\(name) could not be started: \(error)")
        }
        var output: [UInt8] = []
        let deadline = ContinuousClock.now + quickFailure
        while ContinuousClock.now < deadline {
            Self.readAvailable(started.output, into: &output)
            var status: Int32 = 0
            if waitpid(started.pid, &status, WNOHANG) == started.pid {
                let code = (status >> 8) & 0xff
                guard (status & 0x7f) == 0, code == 0 else {
                    Self.readAvailable(started.output, into: &output)
                    Self.drain(started.output)
                    let said = output.isEmpty ? "" : ": \(Self.quoted(String(decoding: output, as: UTF8.self)))"
                    throw .browserUnavailable("\(name) failed (exit status \(code))\(said)")
                }
                Self.drain(started.output)
                return
            }
            // Polling the child: its exit is the only signal there is, and the wait is bounded.
            try? await Task.sleep(for: .milliseconds(20))
        }
        Self.drain(started.output)
        Thread.detach {
            var status: Int32 = 0
            waitpid(started.pid, &status, 0)
        }
    }

    /// What a command wrote, for an error message: its first 400 characters on one line, every
    /// control character escaped, and every URL query (what follows `?` or `&` up to a space or a
    /// quote) left out: a browser command echoes the URL it was given, and a URL's query is where
    /// a token would be.
    static func quoted(_ output: String) -> String {
        var shown = ""
        var inQuery = false
        for character in output.prefix(400) {
            if inQuery {
                guard character.isWhitespace || "\"'<>()[]{}".contains(character) else { continue }
                inQuery = false
            }
            shown.append(character)
            if character == "?" || character == "&" {
                shown.append("…")
                inQuery = true
            }
        }
        let trimmed = shown.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed()
        return OutsideText.escaped(String(trimmed))
    }

    /// Appends what `fd` (non-blocking) holds now, up to 4 KiB in all.
    private static func readAvailable(_ fd: Int32, into output: inout [UInt8]) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while output.count < 4096 {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            output += buffer[..<min(count, 4096 - output.count)]
        }
    }

    /// Reads `fd` to its end on a thread of its own and throws it away: a browser the command
    /// started may write for as long as it runs, and must never block on a full pipe.
    private static func drain(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        Thread.detach {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
            }
            close(fd)
        }
    }

    /// Starts `command` with standard input from /dev/null, standard output and error into a pipe
    /// (the returned descriptor, non-blocking), and none of brokerd's other descriptors (the bus
    /// connection, provider sockets).
    private static func spawn(_ command: [String]) throws(SpawnError) -> (pid: pid_t, output: Int32) {
        // Close-on-exec from the start: a program spawned meanwhile by another thread must not
        // inherit the write end, which would keep the reader waiting for as long as it runs.
        guard let ends = Pipe.make() else { throw SpawnError(errno: errno) }
        let pipe = [ends.read, ends.write]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 2)
        if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }
        var pid = pid_t()
        var arguments = command.map { strdup($0) } + [nil]
        defer { for argument in arguments { free(argument) } }
        let status = posix_spawnp(&pid, command[0], &actions, nil, &arguments, environ)
        close(pipe[1])
        guard status == 0 else {
            close(pipe[0])
            throw SpawnError(errno: status)
        }
        _ = fcntl(pipe[0], F_SETFL, fcntl(pipe[0], F_GETFL) | O_NONBLOCK)
        return (pid, pipe[0])
    }

    struct SpawnError: Error, CustomStringConvertible {
        let errno: Int32
        var description: String { String(cString: strerror(errno)) }
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which its headers do
    /// not show to Swift: looked up by name. Without it, close-on-exec alone keeps descriptors in.
    private static let addCloseFrom:
        (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
            guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
            return unsafeBitCast(
                symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
        }()

    /// The first executable `name` on `$PATH`.
    static func findInPath(_ name: String) -> String? {
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }
}

/// A fire-and-forget POSIX thread; when none can be started, the work runs on the caller's.
enum Thread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        if startDetachedThread(body) != 0 { body() }
    }
}
