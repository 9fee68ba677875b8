import Foundation

/// What a process has loaded, for the tests that check a library is opened only on first use
/// (tpm2-tss, pcsc-lite).
package enum ProcessImage {
    /// The libraries this test bundle's executable names as NEEDED (`readelf -d`): what every
    /// process linking its layers loads at start.
    package static func neededLibraries() async throws -> String {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let dynamic = try await runCommand("/usr/bin/readelf", ["-d", exe])
        guard dynamic.status == 0 else { throw ProcessFailure("readelf: \(dynamic.stderr)") }
        return dynamic.stdout.split(separator: "\n").filter { $0.contains("(NEEDED)") }.joined(separator: "\n")
    }

    /// /proc/self/maps, read to its end (its size reads as 0, so it is read until read(2) gives nothing).
    package static func mappedFiles() throws -> String {
        let fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ProcessFailure("cannot open /proc/self/maps") }
        defer { close(fd) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            text += buffer[..<count]
        }
        return String(decoding: text, as: UTF8.self)
    }
}
