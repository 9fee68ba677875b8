import Crypto
import Foundation
import TestSupport
import Testing

@testable import TPM

/// The TPM layer against a real TPM 2.0 implementation: swtpm, one per test (a machine each).
/// Every TPM exchange blocks, so each test runs on a thread of its own (`offThePool`).
@Suite("TPM device")
struct TPMDeviceTests {
    static let pin = "4711-pin-that-must-not-leak"
    static let secret = Array("set-aside-session-key-0123456789".utf8)

    @Test func sealedSecretComesBackWithTheRightPIN() async throws {
        let swtpm = try SoftwareTPM()
        try await offThePool {
            let device = try TPMDevice(tcti: swtpm.tcti)
            let sealed = try device.seal(Self.secret, pin: Self.pin)
            #expect(!sealed.privateArea.isEmpty)
            #expect(!sealed.privateArea.containsSequence(Self.secret))
            #expect(try device.unseal(sealed, pin: Self.pin) == Self.secret)
            // The stored byte form reads back to the same blobs, on a device opened afresh (the
            // storage primary recreated from the same template is the same key).
            let again = try TPMDevice(tcti: swtpm.tcti)
            #expect(try again.unseal(try SealedSecret(bytes: sealed.bytes), pin: Self.pin) == Self.secret)
        }
    }

    @Test func wrongPINIsRefusedAndCounted() async throws {
        let swtpm = try SoftwareTPM()
        try await offThePool {
            let device = try TPMDevice(tcti: swtpm.tcti)
            try device.setLockout(maxTries: 5, recoveryTime: 600, lockoutRecovery: 600)
            let sealed = try device.seal(Self.secret, pin: Self.pin)
            let error = failure { try device.unseal(sealed, pin: "0000") }
            #expect(error == .wrongPIN(triesLeft: 4))
            #expect(failure { try device.unseal(sealed, pin: Self.pin + " ") } == .wrongPIN(triesLeft: 3))
            #expect(try device.lockoutState().failures == 2)
            Self.expectNoSecret(in: error)
        }
    }

    @Test func fourthWrongPINLocksOutUntilRecovery() async throws {
        let swtpm = try SoftwareTPM()
        try await offThePool {
            let device = try TPMDevice(tcti: swtpm.tcti)
            try device.setLockout(maxTries: 3, recoveryTime: 2, lockoutRecovery: 2)
            let sealed = try device.seal(Self.secret, pin: Self.pin)
            #expect(failure { try device.unseal(sealed, pin: "1") } == .wrongPIN(triesLeft: 2))
            #expect(failure { try device.unseal(sealed, pin: "2") } == .wrongPIN(triesLeft: 1))
            #expect(failure { try device.unseal(sealed, pin: "3") } == .wrongPIN(triesLeft: 0))
            let fourth = failure { try device.unseal(sealed, pin: "4") }
            guard case .lockedOut(let why) = fourth else {
                Issue.record("the fourth wrong PIN gave \(String(describing: fourth))")
                return
            }
            #expect(why.contains("2 seconds"))
            // Now the right PIN too, and it is not counted.
            let right = failure { try device.unseal(sealed, pin: Self.pin) }
            guard case .lockedOut = right else {
                Issue.record("the right PIN during the lockout gave \(String(describing: right))")
                return
            }
            Self.expectNoSecret(in: fourth)
            Self.expectNoSecret(in: right)
            // The TPM forgets a failure every 2 s: the right PIN works again (polled, bounded).
            let deadline = Date().addingTimeInterval(20)
            var unsealed: [UInt8]?
            while unsealed == nil, Date() < deadline {
                do {
                    unsealed = try device.unseal(sealed, pin: Self.pin)
                } catch TPMError.lockedOut {
                    usleep(200_000)
                }
            }
            #expect(unsealed == Self.secret)
        }
    }

    @Test func blobsFromAnotherMachineAreNotThisDevice() async throws {
        let first = try SoftwareTPM()
        let second = try SoftwareTPM()
        try await offThePool {
            let sealed = try TPMDevice(tcti: first.tcti).seal(Self.secret, pin: Self.pin)
            let other = try TPMDevice(tcti: second.tcti)
            #expect(failure { try other.unseal(sealed, pin: Self.pin) } == .notThisDevice)
            // Nor did that count as a wrong PIN there.
            #expect(try other.lockoutState().failures == 0)
        }
    }

    @Test func aFlippedByteIsRefused() async throws {
        let swtpm = try SoftwareTPM()
        try await offThePool {
            let device = try TPMDevice(tcti: swtpm.tcti)
            let sealed = try device.seal(Self.secret, pin: Self.pin)
            // In the encrypted part, the integrity check fails: the same as another TPM's blob.
            for index in [sealed.privateArea.count / 2, sealed.privateArea.count - 1] {
                var damaged = sealed
                damaged.privateArea[index] ^= 0x01
                let error = failure { try device.unseal(damaged, pin: Self.pin) }
                #expect(error == .notThisDevice, "private byte \(index): \(String(describing: error))")
            }
            // In a size field, the TPM refuses the structure.
            var resized = sealed
            resized.privateArea[2] ^= 0x01
            #expect(failure { try device.unseal(resized, pin: Self.pin) } != nil)
            for index in [sealed.publicArea.count / 2, sealed.publicArea.count - 1] {
                var damaged = sealed
                damaged.publicArea[index] ^= 0x01
                let error = failure { try device.unseal(damaged, pin: Self.pin) }
                #expect(error != nil, "public byte \(index)")
            }
            // Cut short, or lengths that do not add up: refused before the TPM sees them.
            var cut = sealed
            cut.privateArea.removeLast()
            guard case .failed = failure({ try device.unseal(cut, pin: Self.pin) }) else {
                Issue.record("a private area cut short was not refused as malformed")
                return
            }
            #expect(throws: TPMError.self) { try SealedSecret(bytes: Array(sealed.bytes.dropLast())) }
            #expect(throws: TPMError.self) { try SealedSecret(bytes: [2] + sealed.bytes.dropFirst()) }
            // The device still works.
            #expect(try device.unseal(sealed, pin: Self.pin) == Self.secret)
        }
    }

    @Test func unreachableTPMIsUnavailableWithWhatToDo() async throws {
        let swtpm = try SoftwareTPM()
        let closedPort = swtpm.port
        swtpm.stop()
        try await offThePool {
            let closed = failure { try TPMDevice(tcti: "swtpm:host=127.0.0.1,port=\(closedPort)") }
            guard case .unavailable(let why) = closed else {
                Issue.record("a closed port gave \(String(describing: closed))")
                return
            }
            #expect(why.contains("127.0.0.1"))
            #expect(why.contains("check that it exists"))
            let missing = failure { try TPMDevice(tcti: "device:/nonexistent/tpmrm0") }
            guard case .unavailable(let text) = missing else {
                Issue.record("a missing device gave \(String(describing: missing))")
                return
            }
            #expect(text.contains("no TPM at /nonexistent/tpmrm0"))
            #expect(text.contains("firmware"))
        }
    }

    @Test func signingKeyStaysInTheTPMAndSignsES256() async throws {
        let swtpm = try SoftwareTPM()
        try await offThePool {
            let device = try TPMDevice(tcti: swtpm.tcti)
            let key = try device.createSigningKey()
            let message = Array("header.payload".utf8)
            let digest = Array(SHA256.hash(data: message))
            let signature = try device.sign(digest: digest, with: key)
            let publicKey = try P256.Signing.PublicKey(x963Representation: [0x04] + key.x + key.y)
            let parsed = try P256.Signing.ECDSASignature(rawRepresentation: signature)
            #expect(publicKey.isValidSignature(parsed, for: message))
            #expect(!publicKey.isValidSignature(parsed, for: Array("header.other".utf8)))
            // Another machine cannot use the key's blobs.
            let other = try SoftwareTPM()
            let elsewhere = failure { try TPMDevice(tcti: other.tcti).sign(digest: digest, with: key) }
            #expect(elsewhere == .notThisDevice)
        }
    }

    @Test func secretLengthIsChecked() async throws {
        let swtpm = try SoftwareTPM()
        try await offThePool {
            let device = try TPMDevice(tcti: swtpm.tcti)
            #expect(throws: TPMError.self) { try device.seal([], pin: Self.pin) }
            #expect(throws: TPMError.self) { try device.seal([UInt8](repeating: 1, count: 129), pin: Self.pin) }
            let longest = [UInt8](repeating: 7, count: 128)
            #expect(try device.unseal(device.seal(longest, pin: ""), pin: "") == longest)
        }
    }

    static func expectNoSecret(in error: TPMError?, sourceLocation: SourceLocation = #_sourceLocation) {
        let text = String(describing: error) + String(reflecting: error)
        #expect(!text.contains(pin), sourceLocation: sourceLocation)
        #expect(!text.contains(String(decoding: secret, as: UTF8.self)), sourceLocation: sourceLocation)
    }
}

/// The error `body` throws, or nil when it returns; an error of another type is an issue.
func failure<T>(_ body: () throws -> T, sourceLocation: SourceLocation = #_sourceLocation) -> TPMError? {
    do {
        _ = try body()
        return nil
    } catch let error as TPMError {
        return error
    } catch {
        Issue.record("not a TPMError: \(error)", sourceLocation: sourceLocation)
        return .failed(code: 0, text: "\(error)")
    }
}

extension Array where Element == UInt8 {
    func containsSequence(_ other: [UInt8]) -> Bool {
        guard !other.isEmpty, other.count <= count else { return false }
        return (0...(count - other.count)).contains { Array(self[$0..<$0 + other.count]) == other }
    }
}
