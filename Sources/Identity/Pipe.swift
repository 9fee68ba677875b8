import Glibc

/// A pipe whose ends are close-on-exec (and, when asked, non-blocking) from the moment they
/// exist: set afterwards, a program another thread spawns in between inherits them. pipe2(2) is a
/// `_GNU_SOURCE` name Glibc's module leaves out, so it is looked up once.
enum Pipe {
    private static let pipe2: (@convention(c) (UnsafeMutablePointer<Int32>?, Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "pipe2") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<Int32>?, Int32) -> Int32).self)
    }()

    /// The read and write ends, or nil with errno set.
    static func make(nonBlocking: Bool = false) -> (read: Int32, write: Int32)? {
        var ends: [Int32] = [-1, -1]
        let flags = O_CLOEXEC | (nonBlocking ? O_NONBLOCK : 0)
        guard let pipe2, ends.withUnsafeMutableBufferPointer({ pipe2($0.baseAddress, flags) }) == 0 else {
            return nil
        }
        return (ends[0], ends[1])
    }
}
