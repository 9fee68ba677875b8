import Glibc

/// Plain HTTP/1.1 on 127.0.0.1, byte for byte, for tests of brokerd's loopback listener: what a
/// browser, or another program, sends there. No client library, so nothing is added or retried.
package enum LoopbackHTTP {
    /// A connection to 127.0.0.1:`port`; nil (errno set) when it is refused.
    package static func connect(_ port: UInt16) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Sends `GET target` and returns the answer's head (status line and headers), waiting at
    /// most 10 s for each read; "" when the connection is refused or closed unanswered.
    package static func head(_ port: UInt16, _ target: String) -> String {
        guard let fd = connect(port) else { return "" }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            answer += buffer[0..<n]
        }
        let text = String(decoding: answer, as: UTF8.self)
        guard let end = text.firstRange(of: "\r\n\r\n") else { return text }
        return String(text[..<end.lowerBound])
    }
}
