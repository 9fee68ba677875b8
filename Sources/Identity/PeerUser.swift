import Glibc

/// The uid of the process at the other end of a loopback TCP connection, asked of the kernel
/// through `NETLINK_SOCK_DIAG` (what `ss` uses): one exact lookup of the peer's socket by its
/// four addresses and ports (`SOCK_DIAG_BY_FAMILY`, not a dump), whose answer carries the
/// socket's `idiag_uid`. TCP has no `SO_PEERCRED`.
///
/// Not `/proc/net/tcp`: that is a text table of every socket of the network namespace, read and
/// parsed whole for each connection, so a flood of connections would make each look-up slower in
/// proportion to the flood; the netlink answer is one hash lookup in the kernel, of the socket as
/// it is at that moment, and needs no privilege. When the kernel cannot answer (no such socket any
/// more, no netlink), the owner is unknown: nil, which the listener refuses like another uid.
final class PeerUser {
    private var socket: Int32

    /// Opens the netlink socket; nil (with `errno` set) when the system refuses it, as a sandbox
    /// without `AF_NETLINK` does.
    init?() {
        socket = Glibc.socket(
            AF_NETLINK, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), Self.netlinkSockDiag)
        guard socket >= 0 else { return nil }
        // The kernel answers within the send; the bound is for a kernel that does not.
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    private static let netlinkSockDiag: Int32 = 4
    private static let sockDiagByFamily: UInt16 = 20
    private static let netlinkRequest: UInt16 = 1
    private static let headerSize = 16
    /// `struct inet_diag_req_v2`.
    private static let requestSize = 56
    /// `idiag_uid`'s offset in the answer: the netlink header, then `inet_diag_msg`'s family,
    /// state, timer, retransmits (4), its socket id (48), expires, rqueue and wqueue (12).
    private static let uidOffset = 16 + 4 + 48 + 12

    /// The uid owning the socket at `peer` (a loopback address and port) connected to
    /// 127.0.0.1:`port`, or nil when the kernel does not say.
    func owner(of peer: sockaddr_in, connectedTo port: UInt16) -> uid_t? {
        guard socket >= 0 else { return nil }
        var request = [UInt8](repeating: 0, count: Self.headerSize + Self.requestSize)
        Self.put(UInt32(request.count), at: 0, in: &request)
        Self.put(Self.sockDiagByFamily, at: 4, in: &request)
        Self.put(Self.netlinkRequest, at: 6, in: &request)
        let sequence = UInt32.random(in: 1...UInt32.max)
        Self.put(sequence, at: 8, in: &request)
        // inet_diag_req_v2: family, protocol, extensions, pad, states.
        request[16] = UInt8(AF_INET)
        request[17] = UInt8(IPPROTO_TCP)
        Self.put(UInt32.max, at: 20, in: &request)
        // inet_diag_sockid of the peer's socket: its source is the peer, its destination the listener.
        // Ports and addresses are in network order, as `sockaddr_in` holds them.
        withUnsafeBytes(of: peer.sin_port) { request.replaceSubrange(24..<26, with: $0) }
        withUnsafeBytes(of: port.bigEndian) { request.replaceSubrange(26..<28, with: $0) }
        withUnsafeBytes(of: peer.sin_addr.s_addr) { request.replaceSubrange(28..<32, with: $0) }
        withUnsafeBytes(of: in_addr_t(0x7F00_0001).bigEndian) { request.replaceSubrange(44..<48, with: $0) }
        // No cookie (INET_DIAG_NOCOOKIE).
        Self.put(UInt32.max, at: 64, in: &request)
        Self.put(UInt32.max, at: 68, in: &request)
        let sent = request.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == request.count else { return nil }
        var answer = [UInt8](repeating: 0, count: 8192)
        while true {
            let count = answer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count >= Self.headerSize else { return nil }
            // An answer to an earlier request that timed out: skip it.
            guard Self.read32(answer, at: 8) == sequence else { continue }
            guard Self.read16(answer, at: 4) == Self.sockDiagByFamily, count >= Self.uidOffset + 4 else { return nil }
            return Self.read32(answer, at: Self.uidOffset)
        }
    }

    func close() {
        if socket >= 0 { Glibc.close(socket) }
        socket = -1
    }

    deinit { close() }

    /// Netlink's own fields are in the host's byte order.
    private static func put<T: FixedWidthInteger>(_ value: T, at offset: Int, in bytes: inout [UInt8]) {
        withUnsafeBytes(of: value) { raw in
            for (index, byte) in raw.enumerated() { bytes[offset + index] = byte }
        }
    }

    private static func read16(_ bytes: [UInt8], at offset: Int) -> UInt16 {
        bytes[offset..<offset + 2].withUnsafeBytes { $0.loadUnaligned(as: UInt16.self) }
    }

    private static func read32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        bytes[offset..<offset + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
    }
}
