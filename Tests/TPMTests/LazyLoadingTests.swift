import Foundation
import TestSupport
import Testing

@testable import TPM

/// tpm2-tss stays out of a process that links the TPM layer until it opens a TPM: this test
/// bundle links it, as brokerd will.
@Suite("tpm2-tss loaded on first use")
struct LazyLoadingTests {
    @Test func linkingTheLayerNeedsNoTss2() async throws {
        let needed = try await ProcessImage.neededLibraries()
        #expect(!needed.isEmpty)
        #expect(!needed.contains("libtss2"), "\(needed)")
    }

    /// This test bundle run again as a fresh process, to run ``childOpensATPM()`` alone: no other
    /// test has opened a TPM there.
    @Test func aFreshProcessLoadsTss2OnlyWhenItOpensATPM() async throws {
        let swtpm = try SoftwareTPM()
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try ChildProcess(
            "test bundle", executable: exe,
            arguments: ["--testing-library", "swift-testing", "--filter", "childOpensATPM"],
            environment: [Self.childVariable: swtpm.tcti])
        let status = try await offThePool { try child.waitForExit(timeout: .seconds(60)) }
        #expect(status == 0, "\(child.allOutput)")
        #expect(child.allOutput.contains(Self.childDone), "\(child.allOutput)")
    }

    static let childVariable = "TPM_TESTS_LAZY_LOAD_CHILD"
    static let childDone = "tpm2-tss mapped only after the open"

    /// Runs only in the child: the maps before and after the first open.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[Self.childVariable] != nil))
    func childOpensATPM() async throws {
        let tcti = try #require(ProcessInfo.processInfo.environment[Self.childVariable])
        let before = try ProcessImage.mappedFiles()
        #expect(!before.contains("libtss2"))
        #expect(!TPMDevice.isLibraryLoaded)
        try await offThePool { _ = try TPMDevice(tcti: tcti) }
        let after = try ProcessImage.mappedFiles()
        #expect(TPMDevice.isLibraryLoaded)
        var mapped = true
        for library in ["libtss2-esys", "libtss2-tctildr", "libtss2-mu", "libtss2-rc"] where !after.contains(library) {
            Issue.record("\(library) is not mapped after a TPM was opened")
            mapped = false
        }
        if mapped && !before.contains("libtss2") { print(Self.childDone) }
    }
}

/// What a person without access to the TPM's device node is told, as user 65534 (not in the tss
/// group), in the test bundle run again as that user.
@Suite("A TPM this user may not open")
struct DeviceAccessTests {
    static let deviceVariable = "TPM_TESTS_DENIED_DEVICE"
    static let childDone = "refused, naming the tss group"

    @Test func aDeviceNodeThisUserMayNotOpenNamesTheTssGroup() async throws {
        let directory = try TemporaryDirectory()
        // Root's node, as /dev/tpmrm0 is root:tss 0660: user 65534 may reach it, not open it.
        let device = try directory.write("tpmrm0", "")
        #expect(chmod(directory.path, 0o755) == 0 && chmod(device, 0o600) == 0)
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try ChildProcess(
            "test bundle as nobody", executable: "/usr/bin/setpriv",
            arguments: [
                "--reuid=65534", "--regid=65534", "--clear-groups", exe,
                "--testing-library", "swift-testing", "--filter", "childOpensADeviceItMayNotUse",
            ],
            environment: [Self.deviceVariable: device])
        let status = try await offThePool { try child.waitForExit(timeout: .seconds(60)) }
        #expect(status == 0, "\(child.allOutput)")
        #expect(child.allOutput.contains(Self.childDone), "\(child.allOutput)")
    }

    /// Runs only in the child, as user 65534.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[Self.deviceVariable] != nil))
    func childOpensADeviceItMayNotUse() throws {
        let device = try #require(ProcessInfo.processInfo.environment[Self.deviceVariable])
        try #require(getuid() == 65534)
        let error = failure { try TPMDevice(tcti: "device:" + device) }
        guard case .unavailable(let why) = error else {
            Issue.record("opening \(device) as nobody gave \(String(describing: error))")
            return
        }
        #expect(why.contains("permission denied on \(device)"))
        #expect(why.contains("tss group"))
        // Refused before tpm2-tss was even loaded.
        #expect(!TPMDevice.isLibraryLoaded)
        if why.contains("tss group") && !TPMDevice.isLibraryLoaded { print(Self.childDone) }
    }
}
