import BrokerCore
import FoundationEssentials
import Glibc

/// The broker's state in `<dir>/state.json`: directory 0700, file 0600, written atomically
/// (a temporary file in the same directory, fsync, rename, fsync of the directory), so a
/// crash leaves either the old or the new state.
public final class FileStateStore: StateStore {
    public let directory: String
    public var path: String { directory + "/state.json" }

    /// Creates the directory (0700) when missing and refuses one that others can read.
    public init(directory: String) throws(StoreError) {
        self.directory = directory
        try Self.makeDirectory(directory)
    }

    public func load() throws -> BrokerState? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw StoreError.io("cannot open \(path)", errno)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreError.io("cannot stat \(path)", errno) }
        guard info.st_uid == getuid() else { throw StoreError.unsafe("\(path) belongs to uid \(info.st_uid), not to this user") }
        guard info.st_mode & 0o077 == 0 else {
            throw StoreError.unsafe("\(path) is readable by others (mode \(String(info.st_mode & 0o777, radix: 8))); it must be 0600")
        }
        let bytes: [UInt8]
        do {
            bytes = try FileBytes.read(fd: fd, limit: 64 << 20)
        } catch {
            throw StoreError.io("cannot read \(path)", error.code)
        }
        let version: Int
        do {
            struct Header: Decodable { var version: Int }
            version = try JSONDecoder().decode(Header.self, from: Data(bytes)).version
        } catch {
            throw StoreError.corrupt("\(path) is not a broker state file (\(bytes.count) bytes)")
        }
        guard version <= BrokerState.currentVersion else {
            throw StoreError.newerFormat("\(path) has format \(version); this brokerd reads up to \(BrokerState.currentVersion)")
        }
        do {
            return try JSONDecoder().decode(BrokerState.self, from: Data(bytes))
        } catch {
            throw StoreError.corrupt("\(path) is damaged: \(error)")
        }
    }

    public func save(_ state: BrokerState) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(state)
        let temporary = "\(directory)/.state.json.\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw StoreError.io("cannot create \(temporary)", errno) }
        var ok = false
        defer {
            if !ok { unlink(temporary) }
        }
        do {
            defer { close(fd) }
            let bytes = [UInt8](data)
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if n < 0 { if errno == EINTR { continue }; throw StoreError.io("cannot write \(temporary)", errno) }
                offset += n
            }
            guard fsync(fd) == 0 else { throw StoreError.io("cannot fsync \(temporary)", errno) }
        }
        guard rename(temporary, path) == 0 else { throw StoreError.io("cannot rename \(temporary) to \(path)", errno) }
        ok = true
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 {
            defer { close(dirFD) }
            guard fsync(dirFD) == 0 else { throw StoreError.io("cannot fsync \(directory)", errno) }
        }
    }

    /// Moves an unreadable state file aside (never overwrites it silently) and returns where it went.
    public func quarantine() -> String? {
        let aside = "\(path).broken-\(time(nil))"
        return rename(path, aside) == 0 ? aside : nil
    }

    private static func makeDirectory(_ directory: String) throws(StoreError) {
        var partial = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            partial += "/" + component
            if mkdir(partial, 0o700) != 0 && errno != EEXIST {
                throw StoreError.io("cannot create \(partial)", errno)
            }
        }
        var info = stat()
        guard stat(directory, &info) == 0 else { throw StoreError.io("cannot stat \(directory)", errno) }
        guard info.st_uid == getuid() else { throw StoreError.unsafe("\(directory) belongs to uid \(info.st_uid), not to this user") }
        if info.st_mode & 0o077 != 0 {
            guard chmod(directory, 0o700) == 0 else { throw StoreError.io("cannot make \(directory) private", errno) }
        }
    }
}

/// Why the state could not be read or written.
public enum StoreError: Error, CustomStringConvertible {
    case io(String, Int32)
    case unsafe(String)
    case corrupt(String)
    case newerFormat(String)

    public var description: String {
        switch self {
        case .io(let what, let code): return "\(what): \(String(cString: strerror(code)))"
        case .unsafe(let why), .corrupt(let why), .newerFormat(let why): return why
        }
    }
}
