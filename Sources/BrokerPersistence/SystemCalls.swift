import Glibc

/// The file system calls the state store makes (open, write, fsync, rename, flock), in one place,
/// so that a test can make any of them fail with the errno a full disk or a failing device gives
/// and see that the store changes nothing it should not.
struct SystemCalls: Sendable {
    enum Call: Sendable, Hashable { case open, write, fsync, rename, flock }

    var open: @Sendable (_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32
    var write: @Sendable (_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) -> Int
    var fsync: @Sendable (_ descriptor: Int32) -> Int32
    var rename: @Sendable (_ from: String, _ to: String) -> Int32
    var flock: @Sendable (_ descriptor: Int32, _ operation: Int32) -> Int32

    /// The kernel's.
    static let system = SystemCalls(
        open: { Glibc.open($0, $1, $2) },
        write: { Glibc.write($0, $1.baseAddress, $1.count) },
        fsync: { Glibc.fsync($0) },
        rename: { Glibc.rename($0, $1) },
        flock: { lockFile($0, $1) })

    /// These calls, but `call` fails with `code` (as errno) whenever `when` says so.
    func failing(_ call: Call, with code: Int32, when: @escaping @Sendable () -> Bool = { true }) -> SystemCalls {
        var calls = self
        switch call {
        case .open:
            let real = open
            calls.open = { when() ? Self.fail(code) : real($0, $1, $2) }
        case .write:
            let real = write
            calls.write = { when() ? Int(Self.fail(code)) : real($0, $1) }
        case .fsync:
            let real = fsync
            calls.fsync = { when() ? Self.fail(code) : real($0) }
        case .rename:
            let real = rename
            calls.rename = { when() ? Self.fail(code) : real($0, $1) }
        case .flock:
            let real = flock
            calls.flock = { when() ? Self.fail(code) : real($0, $1) }
        }
        return calls
    }

    private static func fail(_ code: Int32) -> Int32 {
        errno = code
        return -1
    }
}

/// `flock(2)`: in a closure the name would also mean Glibc's `struct flock`.
private func lockFile(_ descriptor: Int32, _ operation: Int32) -> Int32 { flock(descriptor, operation) }
