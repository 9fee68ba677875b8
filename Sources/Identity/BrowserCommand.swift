import Glibc
import Locking

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
    /// command that ends with a failure sooner (xdg-open finding no browser) is reported.
    public func open(_ url: String) async throws(IdentityError) {
        let command = command(for: url)
        let name = command[0]
        let pid: pid_t
        do { pid = try Self.spawn(command) } catch {
            throw .browserUnavailable("\(name) could not be started: \(error)")
        }
        let deadline = ContinuousClock.now + quickFailure
        while ContinuousClock.now < deadline {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                let code = (status >> 8) & 0xff
                guard (status & 0x7f) == 0, code == 0 else {
                    throw .browserUnavailable("\(name) failed (exit status \(code))")
                }
                return
            }
            // Polling the child: its exit is the only signal there is, and the wait is bounded.
            try? await Task.sleep(for: .milliseconds(20))
        }
        Thread.detach {
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }

    /// Starts `command` with standard input from /dev/null and none of brokerd's other
    /// descriptors (the bus connection, provider sockets).
    private static func spawn(_ command: [String]) throws(SpawnError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }
        var pid = pid_t()
        var arguments = command.map { strdup($0) } + [nil]
        defer { for argument in arguments { free(argument) } }
        let status = posix_spawnp(&pid, command[0], &actions, nil, &arguments, environ)
        guard status == 0 else { throw SpawnError(errno: status) }
        return pid
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
