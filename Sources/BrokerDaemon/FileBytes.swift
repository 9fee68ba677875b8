import Glibc

/// Reads a whole (small) file.
enum FileBytes {
    struct ReadError: Error, CustomStringConvertible {
        var code: Int32
        var description: String { String(cString: strerror(code)) }
    }

    static func read(_ path: String, limit: Int = 1 << 20) throws(ReadError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ReadError(code: errno) }
        defer { close(fd) }
        return try read(fd: fd, limit: limit)
    }

    /// Reads what is left of an open file, refusing more than `limit` bytes.
    static func read(fd: Int32, limit: Int = 1 << 20) throws(ReadError) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while bytes.count <= limit {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ReadError(code: errno)
            }
            if n == 0 { return bytes }
            bytes.append(contentsOf: buffer[0..<n])
        }
        throw ReadError(code: EFBIG)
    }
}
