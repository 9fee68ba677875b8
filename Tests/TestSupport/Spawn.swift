import Foundation

/// Starts a process with `posix_spawn`, its standard streams on pipes.
///
/// Not Foundation's `Process`: on Linux its `run()` over-reads `/proc/self/fd` directory entries
/// and crashes now and then (swift-corelibs-foundation #5472, seen here once in a few full runs,
/// more often the more threads and descriptors the test process holds).
package struct Spawned {
    package let pid: pid_t
    /// The write end of the child's standard input.
    package let input: Int32
    /// The read ends of the child's standard output and error.
    package let output: Int32
    package let error: Int32

    package static func start(_ executable: String, arguments: [String], environment: [String: String]) throws
        -> Spawned
    {
        func pipePair() throws -> (read: Int32, write: Int32) {
            // pipe2(O_CLOEXEC) is not visible from Swift here; children close everything past
            // standard error anyway (below), so close-on-exec only keeps them out of others' execs.
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { throw ProcessFailure("pipe: \(String(cString: strerror(errno)))") }
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            return (fds[0], fds[1])
        }
        let stdin = try pipePair()
        let stdout = try pipePair()
        let stderr = try pipePair()

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdin.read, 0)
        posix_spawn_file_actions_adddup2(&actions, stdout.write, 1)
        posix_spawn_file_actions_adddup2(&actions, stderr.write, 2)
        // Nothing else of the test process goes to the child: not every descriptor here is
        // close-on-exec (a file being written, such as a browser script, would otherwise stay
        // open for writing in a long-lived child, and running that script fails with ETXTBSY).
        guard let closeFrom = Self.addCloseFrom else {
            throw ProcessFailure("this C library lacks posix_spawn_file_actions_addclosefrom_np (glibc 2.34)")
        }
        _ = closeFrom(&actions, 3)

        // The child starts with default signal handling and nothing blocked (the test process ignores SIGPIPE).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for argument in argv { free(argument) }
            for variable in envp { free(variable) }
        }
        var pid = pid_t()
        let status = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        for fd in [stdin.read, stdout.write, stderr.write] { close(fd) }
        guard status == 0 else {
            for fd in [stdin.write, stdout.read, stderr.read] { close(fd) }
            throw ProcessFailure("cannot start \(executable): \(String(cString: strerror(status)))")
        }
        return Spawned(pid: pid, input: stdin.write, output: stdout.read, error: stderr.read)
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which its headers do
    /// not show to Swift: looked up by name.
    private static let addCloseFrom:
        (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
            guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
            return unsafeBitCast(
                symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
        }()

    /// Waits for the child's exit (on the calling thread): its status, 128 + N when killed by signal N.
    package func waitForStatus() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return -1 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}
