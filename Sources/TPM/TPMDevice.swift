import CTPM
import Crypto

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One open TPM 2.0: its ESAPI context and the storage primary created under the owner hierarchy
/// when it opened (the same key each time, from the TPM's owner seed; nothing is kept in the TPM).
///
/// Each operation is a blocking exchange with the TPM (milliseconds to a second on a real chip):
/// call it off the executor's threads. Not `Sendable`: the ESAPI context may be used by one thread
/// at a time, so a `TPMDevice` stays where it was opened; closed when released.
///
/// tpm2-tss is loaded on the first open, not before (``isLibraryLoaded``).
public final class TPMDevice {
    /// The kernel's resource manager: what a program that is not the only TPM user opens.
    public static let defaultTCTI = "device:/dev/tpmrm0"

    /// The longest secret the TPM seals (MAX_SYM_DATA).
    public static let maximumSecretLength = 128

    private let context: OpaquePointer

    /// Whether this process has loaded tpm2-tss (it has once a device opened, or tried to).
    public static var isLibraryLoaded: Bool { ctpm_is_loaded() != 0 }

    /// Opens the TPM that `tcti` names: "device:/dev/tpmrm0", "swtpm:host=127.0.0.1,port=2321", ...
    public init(tcti: String = defaultTCTI) throws(TPMError) {
        try Self.checkDevice(tcti)
        var opened: OpaquePointer?
        let rc = ctpm_open(tcti, &opened)
        guard rc == 0, let opened else {
            if rc == CTPM_RC_NOT_LOADED {
                throw .unavailable(ctpm_load_failure().map { String(cString: $0) } ?? "tpm2-tss could not be loaded")
            }
            if ctpm_kind(rc) == CTPM_UNREACHABLE {
                throw .unavailable(
                    "cannot reach the TPM at \"\(tcti)\" (\(Self.text(rc))): check that it exists and is enabled")
            }
            throw Self.hierarchyError(rc, "owner", context: nil)
        }
        context = opened
    }

    deinit { ctpm_close(context) }

    /// Seals `secret` (1 to 128 bytes) to this TPM behind `pin`. Each wrong PIN given to
    /// ``unseal(_:pin:)`` counts toward the TPM's dictionary-attack lockout.
    public func seal(_ secret: [UInt8], pin: String) throws(TPMError) -> SealedSecret {
        guard (1...Self.maximumSecretLength).contains(secret.count) else {
            throw .malformed("a secret to seal holds 1 to \(Self.maximumSecretLength) bytes, not \(secret.count)")
        }
        var auth = Self.authValue(pin)
        defer { Self.wipe(&auth) }
        var publicArea = [UInt8](repeating: 0, count: 1024)
        var privateArea = [UInt8](repeating: 0, count: 1024)
        var publicCount = 0
        var privateCount = 0
        let rc = ctpm_seal(
            context, auth, auth.count, secret, secret.count, &publicArea, publicArea.count, &publicCount,
            &privateArea, privateArea.count, &privateCount)
        guard rc == 0 else { throw Self.error(rc, context: context) }
        return SealedSecret(
            publicArea: Array(publicArea[..<publicCount]), privateArea: Array(privateArea[..<privateCount]))
    }

    /// The secret `sealed` holds, given the PIN it was sealed with.
    public func unseal(_ sealed: SealedSecret, pin: String) throws(TPMError) -> [UInt8] {
        var auth = Self.authValue(pin)
        defer { Self.wipe(&auth) }
        var secret = [UInt8](repeating: 0, count: Self.maximumSecretLength)
        var count = 0
        let rc = ctpm_unseal(
            context, auth, auth.count, sealed.publicArea, sealed.publicArea.count, sealed.privateArea,
            sealed.privateArea.count, &secret, secret.count, &count)
        guard rc == 0 else {
            Self.wipe(&secret)
            throw Self.error(rc, context: context)
        }
        return Array(secret[..<count])
    }

    /// Sets the TPM's dictionary-attack lockout: after `maxTries` wrong PINs it refuses every
    /// PIN; it forgets one failure every `recoveryTime` seconds (0: never, only a reset does);
    /// `lockoutRecovery` is how long a wrong lockout-hierarchy auth locks that hierarchy. Needs the
    /// lockout hierarchy's auth to be empty (as a TPM comes, and as most Linux machines keep it).
    /// The setting is the whole TPM's, not this program's.
    public func setLockout(maxTries: UInt32, recoveryTime: UInt32, lockoutRecovery: UInt32) throws(TPMError) {
        let rc = ctpm_set_lockout(context, maxTries, recoveryTime, lockoutRecovery)
        guard rc == 0 else { throw Self.hierarchyError(rc, "lockout", context: context) }
    }

    /// The TPM's lockout state: failures counted, failures tolerated, seconds to forget one.
    public func lockoutState() throws(TPMError) -> (failures: Int, maxTries: Int, recoveryTime: Int) {
        var counter: UInt32 = 0
        var maxTries: UInt32 = 0
        var interval: UInt32 = 0
        let rc = ctpm_lockout_state(context, &counter, &maxTries, &interval)
        guard rc == 0 else { throw .failed(code: rc, text: Self.text(rc)) }
        return (Int(counter), Int(maxTries), Int(interval))
    }

    /// Creates an ECC P-256 signing key inside the TPM, bound to it (its private part never
    /// leaves it unencrypted, its blob loads on no other TPM), used with `pin` ("" for none).
    public func createSigningKey(pin: String = "") throws(TPMError) -> TPMSigningKey {
        var auth = pin.isEmpty ? [] : Self.authValue(pin)
        defer { Self.wipe(&auth) }
        var x = [UInt8](repeating: 0, count: 32)
        var y = [UInt8](repeating: 0, count: 32)
        var publicArea = [UInt8](repeating: 0, count: 1024)
        var privateArea = [UInt8](repeating: 0, count: 1024)
        var publicCount = 0
        var privateCount = 0
        let rc = ctpm_create_signing_key(
            context, auth, auth.count, &x, &y, &publicArea, publicArea.count, &publicCount, &privateArea,
            privateArea.count, &privateCount)
        guard rc == 0 else { throw Self.error(rc, context: context) }
        return TPMSigningKey(
            x: x, y: y,
            blobs: SealedSecret(
                publicArea: Array(publicArea[..<publicCount]), privateArea: Array(privateArea[..<privateCount])))
    }

    /// Signs a SHA-256 digest with `key` (ECDSA): r and s, 32 bytes each, as JWS's ES256 wants them.
    public func sign(digest: [UInt8], with key: TPMSigningKey, pin: String = "") throws(TPMError) -> [UInt8] {
        guard digest.count == 32 else { throw .malformed("a SHA-256 digest has 32 bytes, not \(digest.count)") }
        var auth = pin.isEmpty ? [] : Self.authValue(pin)
        defer { Self.wipe(&auth) }
        var signature = [UInt8](repeating: 0, count: 64)
        let rc = ctpm_sign(
            context, auth, auth.count, key.blobs.publicArea, key.blobs.publicArea.count, key.blobs.privateArea,
            key.blobs.privateArea.count, digest, &signature)
        guard rc == 0 else { throw Self.error(rc, context: context) }
        return signature
    }

    /// The authValue a PIN opens: SHA-256 of its UTF-8. A plain hash, no slow key derivation, is
    /// enough: the value never leaves the TPM's session (it travels encrypted, and the sealed blob
    /// holds it encrypted under the TPM's storage key), so no one can test guesses against it
    /// offline; online, the TPM's dictionary-attack lockout limits guessing to a few tries, which
    /// a slow hash would not add to. It also gives every PIN the fixed 32 bytes TPM2B_AUTH holds.
    static func authValue(_ pin: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(pin.utf8)))
    }

    private static func wipe(_ bytes: inout [UInt8]) {
        for index in bytes.indices { bytes[index] = 0 }
    }

    static func text(_ rc: UInt32) -> String {
        ctpm_decode(rc).map { String(cString: $0) } ?? "TPM error 0x\(String(rc, radix: 16))"
    }

    /// The error a person can act on for `rc`; asks the TPM how many tries are left after a wrong PIN.
    private static func error(_ rc: UInt32, context: OpaquePointer?) -> TPMError {
        switch ctpm_kind(rc) {
        case CTPM_WRONG_AUTH:
            var counter: UInt32 = 0
            var maxTries: UInt32 = 0
            var interval: UInt32 = 0
            guard let context, ctpm_lockout_state(context, &counter, &maxTries, &interval) == 0 else {
                return .wrongPIN(triesLeft: nil)
            }
            return .wrongPIN(triesLeft: max(0, Int(maxTries) - Int(counter)))
        case CTPM_LOCKED_OUT:
            var counter: UInt32 = 0
            var maxTries: UInt32 = 0
            var interval: UInt32 = 0
            if let context, ctpm_lockout_state(context, &counter, &maxTries, &interval) == 0, interval > 0 {
                return .lockedOut(
                    "too many wrong PINs; this device's TPM accepts a PIN again in at most \(interval) seconds")
            }
            return .lockedOut(
                "too many wrong PINs; this device's TPM accepts no PIN until an administrator resets its lockout")
        case CTPM_NOT_THIS_TPM: return .notThisDevice
        case CTPM_UNREACHABLE:
            return .unavailable("lost the connection to the TPM (\(text(rc)))")
        default: return .failed(code: rc, text: text(rc))
        }
    }

    /// The error for an operation authorized by a hierarchy's auth (assumed empty), not a PIN: a
    /// refused auth means an administrator has set one.
    private static func hierarchyError(_ rc: UInt32, _ hierarchy: String, context: OpaquePointer?) -> TPMError {
        guard ctpm_kind(rc) == CTPM_WRONG_AUTH else { return error(rc, context: context) }
        return .unavailable(
            "the TPM's \(hierarchy) hierarchy has a password set (tpm2_changeauth); this needs it empty, "
                + "as a TPM comes from the factory")
    }

    /// For a device TCTI, why its node cannot be opened, before tpm2-tss is even loaded: the
    /// cases a person fixes (no TPM, no permission) get their own words.
    private static func checkDevice(_ tcti: String) throws(TPMError) {
        guard tcti.hasPrefix("device") else { return }
        var path = tcti.split(separator: ":", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
        if path.isEmpty { path = "/dev/tpm0" }
        if access(path, R_OK | W_OK) == 0 { return }
        let code = errno
        switch code {
        case ENOENT, ENODEV, ENXIO:
            throw .unavailable(
                "no TPM at \(path): this machine has no TPM 2.0, it is turned off in the firmware settings, "
                    + "or its kernel driver (tpm_tis, tpm_crb) is not loaded")
        case EACCES, EPERM:
            throw .unavailable(
                "permission denied on \(path): add this user to the tss group (usermod -aG tss USER) "
                    + "and sign in again")
        default:
            throw .unavailable("cannot open \(path): \(String(cString: strerror(code)))")
        }
    }
}

/// A signing key that lives in one TPM: its public point, and its blobs to load it again.
public struct TPMSigningKey: Codable, Equatable, Sendable {
    /// The public point's coordinates, 32 bytes each (a JWK's "x" and "y").
    public var x: [UInt8]
    public var y: [UInt8]
    /// The key's public and (TPM-encrypted) private areas.
    public var blobs: SealedSecret
}
