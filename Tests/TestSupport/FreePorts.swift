import Foundation

/// Ports a test's server may bind, for servers that take a port but cannot pick one themselves
/// (swtpm, vpcd). Free when checked only: another program may take one before the server binds
/// it, so a caller that fails to start tries another pair.
package enum FreePorts {
    /// A port P such that P and P + 1 are free now, on 127.0.0.1 or, with `everyAddress`, on the
    /// wildcard address (for a server that binds that).
    package static func pair(everyAddress: Bool = false) -> UInt16? {
        for _ in 0..<64 {
            guard let port = UInt16(exactly: Int.random(in: 20_000..<60_000)) else { continue }
            if isFree(port, everyAddress) && isFree(port + 1, everyAddress) { return port }
        }
        return nil
    }

    private static func isFree(_ port: UInt16, _ everyAddress: Bool) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = everyAddress ? in_addr_t(0) : in_addr_t(0x7F00_0001).bigEndian
        address.sin_port = port.bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
