import Glibc

/// Reads a whole (small) file.
package enum FileBytes {
    package struct ReadError: Error, CustomStringConvertible {
        package var code: Int32
        package var description: String { String(cString: strerror(code)) }
    }

    package static func read(_ path: String, limit: Int = 1 << 20) throws(ReadError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ReadError(code: errno) }
        defer { close(fd) }
        return try read(fd: fd, limit: limit)
    }

    /// Reads what is left of an open file, refusing more than `limit` bytes.
    package static func read(fd: Int32, limit: Int = 1 << 20) throws(ReadError) -> [UInt8] {
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

    /// A regular file's bytes, with the owner and permission bits of the very file read.
    package struct RegularFile {
        package var bytes: [UInt8]
        package var owner: uid_t
        /// The permission bits (`st_mode & 0o777`).
        package var permissions: UInt32
    }

    package enum RegularFileError: Error, CustomStringConvertible {
        /// `open` failed with this errno.
        case open(Int32)
        /// Not a regular file: what it is instead ("a named pipe (FIFO)", ...).
        case notRegular(String)
        case read(Int32)

        package var description: String {
            switch self {
            case .open(let code), .read(let code): return String(cString: strerror(code))
            case .notRegular(let kind): return "it is \(kind), not a regular file"
            }
        }
    }

    /// Reads `path` when it is a regular file (symbolic links followed). The checks are made with
    /// `fstat` on the descriptor that is read, so the file cannot be swapped between them and the
    /// read; `O_NONBLOCK` keeps a named pipe from hanging the open.
    package static func readRegularFile(_ path: String, limit: Int = 1 << 20) throws(RegularFileError) -> RegularFile {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { throw .open(errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .read(errno) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .notRegular(kind(info.st_mode)) }
        do {
            let bytes = try read(fd: fd, limit: limit)
            return RegularFile(bytes: bytes, owner: info.st_uid, permissions: UInt32(info.st_mode) & 0o777)
        } catch {
            throw .read(error.code)
        }
    }

    /// What a file that is not a regular one is, for a message.
    package static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: return "a named pipe (FIFO)"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFDIR: return "a directory"
        case S_IFSOCK: return "a socket"
        case S_IFLNK: return "a symbolic link"
        default: return "a file of another kind"
        }
    }
}
