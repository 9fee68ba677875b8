import Foundation

/// What an administrator did to accounts that outlives the tokens already handed out: when each
/// user's sessions were last revoked (so that Continuous Access Evaluation can refuse access tokens
/// issued before), and which accounts are disabled.
///
/// "Issued before" is decided by one counter that orders issuances and revocations, not by clock
/// time: an access token's `iat` has whole seconds, and a token issued in the same second as, but
/// after, the revocation must be accepted.
actor SessionRevocations {
    private struct Revocation {
        var sequence: UInt64
        var at: Date
    }

    private var sequence: UInt64 = 0
    /// The sequence number of each access token that declared the `cp1` capability, by its `uti`.
    private var issuances: [String: UInt64] = [:]
    private var revocations: [String: Revocation] = [:]
    private var disabled: Set<String> = []

    /// Records that an access token (`uti`) is being issued now.
    func recordIssuance(uti: String) {
        sequence += 1
        issuances[uti] = sequence
    }

    /// Records that every access token of `username` issued until now needs a fresh one; returns
    /// the instant, which the claims challenge names.
    func revoke(username: String) -> Date {
        sequence += 1
        let now = Date()
        revocations[username.lowercased()] = Revocation(sequence: sequence, at: now)
        return now
    }

    /// The revocation that an access token (`uti`, issued at `issuedAt`) predates, if any. A token
    /// this process did not record is compared by its `iat`, in whole seconds.
    func revocation(before uti: String, issuedAt: Date, username: String) -> Date? {
        guard let revocation = revocations[username.lowercased()] else { return nil }
        if let issued = issuances[uti] { return issued < revocation.sequence ? revocation.at : nil }
        return issuedAt <= revocation.at ? revocation.at : nil
    }

    func disable(username: String) {
        disabled.insert(username.lowercased())
    }

    /// Returns whether the account was disabled.
    func enable(username: String) -> Bool {
        disabled.remove(username.lowercased()) != nil
    }

    func isDisabled(_ username: String) -> Bool {
        disabled.contains(username.lowercased())
    }
}
