import CTPM

/// Why a TPM operation failed, in terms a person can act on. No case carries the PIN or the
/// secret, nor text derived from them.
public enum TPMError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No TPM can be used: no device, no permission on it, nothing listening at the configured
    /// address, or tpm2-tss not installed. The text says which, and what to do.
    case unavailable(String)
    /// The PIN is wrong; the TPM counted it. `triesLeft` is how many more wrong PINs it takes
    /// before the lockout, when the TPM says.
    case wrongPIN(triesLeft: Int?)
    /// Too many wrong PINs: the TPM refuses every PIN, the right one too, for a while. The text
    /// says for how long.
    case lockedOut(String)
    /// The sealed secret cannot be loaded by this TPM: it was sealed on another machine, or this
    /// TPM has been cleared since (its storage key is another one now). It must be sealed again.
    case notThisDevice
    /// Anything else: tpm2-tss's code and its text (`Tss2_RC_Decode`).
    case failed(code: UInt32, text: String)

    public var description: String {
        switch self {
        case .unavailable(let why): "no TPM: \(why)"
        case .wrongPIN(0?): "wrong PIN; that was the last try: the TPM now refuses every PIN for a while"
        case .wrongPIN(1?): "wrong PIN (one more wrong PIN locks the TPM for a while)"
        case .wrongPIN(let triesLeft?): "wrong PIN (\(triesLeft) more wrong PINs lock the TPM for a while)"
        case .wrongPIN(nil): "wrong PIN"
        case .lockedOut(let why): "locked out: \(why)"
        case .notThisDevice:
            "the sealed secret belongs to another TPM (sealed on another machine, or this TPM was cleared since)"
        case .failed(let code, let text): "TPM operation failed: \(text) (0x\(String(code, radix: 16)))"
        }
    }

    /// A refusal of what the caller handed in, with no TPM code behind it.
    static func malformed(_ text: String) -> TPMError { .failed(code: CTPM_RC_MALFORMED, text: text) }
}
