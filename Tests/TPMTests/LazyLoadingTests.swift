import Foundation
import TestSupport
import Testing

@testable import TPM

/// tpm2-tss stays out of a process that links the TPM layer until it opens a TPM: this test
/// bundle links it, as brokerd will.
@Suite("tpm2-tss loaded on first use")
struct LazyLoadingTests {
    @Test func linkingTheLayerNeedsNoTss2() async throws {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let dynamic = try await runCommand("/usr/bin/readelf", ["-d", exe])
        try #require(dynamic.status == 0, "readelf: \(dynamic.stderr)")
        #expect(dynamic.stdout.contains("(NEEDED)"))
        #expect(!dynamic.stdout.contains("libtss2"))
    }

    @Test func mapsHoldTss2OnlyOnceATPMWasOpened() async throws {
        // Other tests of this process may have opened one already; the flag and the maps agree.
        let before = try mappedFiles()
        #expect(before.contains("libtss2-esys") == TPMDevice.isLibraryLoaded)
        let swtpm = try SoftwareTPM()
        try await offThePool { _ = try TPMDevice(tcti: swtpm.tcti) }
        let after = try mappedFiles()
        #expect(TPMDevice.isLibraryLoaded)
        for library in ["libtss2-esys", "libtss2-tctildr", "libtss2-mu", "libtss2-rc"] {
            #expect(after.contains(library), "\(library) is not mapped after a TPM was opened")
        }
    }
}

/// /proc/self/maps, read to its end (its size reads as 0, so it is read until read(2) gives nothing).
func mappedFiles() throws -> String {
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
