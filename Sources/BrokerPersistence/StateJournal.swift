import BrokerCore
import JSON

/// The state journal's format (`state.journal`): the changes made after `state.json` was written,
/// so that a change costs a line the size of what changed instead of the whole file.
///
/// ```text
/// {"journal":1,"snapshot":"<id>"}
/// {"clients":{"notes":{"lastSeen":"alice-oid"}}}
/// {"accounts":{"bob-oid":{…}},"clients":{"mail":{"account":"bob-oid","refreshToken":"…"},"notes":null},"current":{…}}
/// ```
///
/// The first line names the snapshot (`state.json`'s `journal`) the lines apply to; a journal
/// that names another snapshot is left over from before that snapshot was written, which holds
/// its changes already, and is ignored. Each further line is one change, keys sorted:
///
/// - a top-level key replaces the document's value (`null`: none), as in the state file;
/// - in `clients`, each named client's record is replaced whole (`null`: the record is gone);
///   records name their accounts by table key, as in the state file;
/// - in `accounts`, each named key is added to the account table (accounts no client names
///   any more stay there until the next snapshot).
///
/// A line is written with one `write` and ends with a newline; a last line without one was cut
/// short by a crash or power loss before it was acknowledged, and is dropped.
enum StateJournal {
    static let version = 1

    /// The journal's first line, for the snapshot `id`.
    static func header(snapshot id: String) -> [UInt8] {
        var out = JSONWriter(capacity: 48)
        out.raw("{\"journal\":\(version),\"snapshot\":")
        out.string(id)
        out.raw("}\n")
        return out.bytes
    }

    // MARK: Writing

    /// How a change is written.
    enum Change {
        /// Nothing kept at rest changed.
        case none
        /// This line. `removesSecret`: a secret left the state (a refresh token, a device secret,
        /// a token owed a revocation) and is held nowhere in it any more, yet stays in the
        /// snapshot or an earlier line until a snapshot is written: the store writes one at the
        /// sync that follows. A sign-out moves its refresh tokens and device secrets to the
        /// revocations owed (they leave once the revocation is settled). A refresh token replaced
        /// by another is not such a change: the provider no longer takes a rotated one, and a
        /// refresh must not cost the whole file. Nor is a refresh token the provider revoked
        /// (`revoked`), for the same reason: it leaves with the next snapshot.
        case line([UInt8], removesSecret: Bool)
    }

    /// The line that turns `old` into `new` (what of them is kept at rest). Accounts that `keys`
    /// has no key for get one, written in the line.
    static func change(
        from old: BrokerState, to new: BrokerState, revoked: Set<String>, keys: inout StateFileFormat.AccountKeys
    ) -> Change {
        var clients = JSONWriter(capacity: 256)
        _ = keys.takeAdded()
        var changed: [(String, ClientRecord?)] = []
        var newClients = 0
        var removed: [String] = []
        // One look at each client; an unchanged one shares its storage and compares at once.
        for (clientId, record) in new.clients {
            let before = old.clients[clientId]
            if let before {
                if before.sameAtRest(as: record) { continue }
            } else {
                newClients += 1
            }
            if record.isEmptyAtRest {
                if let before, !before.isEmptyAtRest {
                    if let token = before.refreshToken { removed.append(token) }
                    changed.append((clientId, nil))
                }
            } else {
                if let token = before?.refreshToken, record.refreshToken == nil { removed.append(token) }
                changed.append((clientId, record))
            }
        }
        // Fewer records than the old ones plus the new: some were removed.
        if new.clients.count < old.clients.count + newClients {
            for (clientId, record) in old.clients where !record.isEmptyAtRest && new.clients[clientId] == nil {
                if let token = record.refreshToken { removed.append(token) }
                changed.append((clientId, nil))
            }
        }
        removed += removedSecrets(singleSignOn: old.singleSignOn, pendingRevocations: old.pendingRevocations, in: new)
        let removesSecret = removed.contains { !revoked.contains($0) && !holds(new, $0) }
        if !changed.isEmpty {
            clients.raw(",\"clients\":{")
            for (index, (clientId, record)) in changed.sorted(by: { $0.0 < $1.0 }).enumerated() {
                if index > 0 { clients.raw(",") }
                clients.string(clientId)
                clients.raw(":")
                if let record { clients.client(record, keys: &keys) } else { clients.raw("null") }
            }
            clients.raw("}")
        }
        var out = JSONWriter(capacity: clients.bytes.count + 256)
        // Only the accounts this line added: the rest are in the snapshot or earlier lines.
        let added = keys.takeAdded()
        if !added.isEmpty {
            out.raw(",\"accounts\":")
            out.accounts(added, of: keys.table)
        }
        if old.cleanUpOwed != new.cleanUpOwed {
            out.raw(new.cleanUpOwed ? ",\"cleanUpOwed\":true" : ",\"cleanUpOwed\":null")
        }
        out.bytes.append(contentsOf: clients.bytes)
        if old.current != new.current {
            out.raw(",\"current\":")
            if let current = new.current { out.account(current) } else { out.raw("null") }
        }
        if old.deviceId != new.deviceId {
            out.raw(",\"deviceId\":")
            out.string(new.deviceId)
        }
        if old.handledEvents != new.handledEvents {
            out.raw(",\"handledEvents\":")
            if new.handledEvents.isEmpty { out.raw("null") } else { out.strings(new.handledEvents) }
        }
        // Empty collections as null: the state file leaves them out.
        if old.pendingRevocations != new.pendingRevocations {
            out.raw(",\"pendingRevocations\":")
            if new.pendingRevocations.isEmpty {
                out.raw("null")
            } else {
                out.pendingRevocations(new.pendingRevocations)
            }
        }
        if old.signOutDeadline != new.signOutDeadline {
            out.raw(",\"signOutDeadline\":")
            out.raw(new.signOutDeadline.map { "\($0)" } ?? "null")
        }
        if old.signedInAt != new.signedInAt {
            out.raw(",\"signedInAt\":")
            out.raw(new.signedInAt.map { "\($0)" } ?? "null")
        }
        if old.signedInBoot != new.signedInBoot {
            out.raw(",\"signedInBoot\":")
            if let boot = new.signedInBoot { out.string(boot) } else { out.raw("null") }
        }
        if old.singleSignOn != new.singleSignOn {
            out.raw(",\"singleSignOn\":")
            if new.singleSignOn.isEmpty { out.raw("null") } else { out.singleSignOn(new.singleSignOn) }
        }
        guard !out.bytes.isEmpty else { return .none }
        // Every field above starts with a comma: the first one opens the object instead.
        out.bytes[0] = UInt8(ascii: "{")
        out.raw("}\n")
        return .line(out.bytes, removesSecret: removesSecret)
    }

    /// The device secrets and tokens owed a revocation of the state before a change (its
    /// `singleSignOn` and `pendingRevocations`) that `new` does not have in the same place (the
    /// clients' refresh tokens are looked at where their records are).
    static func removedSecrets(
        singleSignOn: [String: SingleSignOnGrant], pendingRevocations: [PendingRevocation], in new: BrokerState
    ) -> [String] {
        var removed: [String] = []
        if singleSignOn != new.singleSignOn {
            let kept = Set(new.singleSignOn.values.compactMap { $0.deviceSecret?.secret })
            removed += singleSignOn.values.compactMap { $0.deviceSecret?.secret }.filter { !kept.contains($0) }
        }
        if pendingRevocations != new.pendingRevocations {
            let kept = Set(new.pendingRevocations.map(\.token.value))
            removed += pendingRevocations.map(\.token.value).filter { !kept.contains($0) }
        }
        return removed
    }

    /// Whether `state` holds the secret `value` anywhere: a refresh token, a device secret, a
    /// token owed a revocation. Looked at only for a secret a change removed (rare: a sign-out, a
    /// confirmed revocation), so a look at every client is affordable.
    static func holds(_ state: BrokerState, _ value: String) -> Bool {
        state.pendingRevocations.contains { $0.token.value == value }
            || state.singleSignOn.values.contains { $0.deviceSecret?.secret == value }
            || state.clients.values.contains { $0.refreshToken == value }
    }

    // MARK: Reading

    /// What replaying a journal found.
    struct Replayed {
        /// Changes applied.
        var lines = 0
        /// The journal belongs to an earlier snapshot: nothing of it was applied.
        var stale = false
        /// Bytes of a last line cut short (dropped).
        var tornBytes = 0
        /// A line took a secret out of the state: the files still hold it (a crash came before
        /// the snapshot that follows such a line, or it was a revoked refresh token's, which
        /// waits for the next one), and the next snapshot removes it.
        var removedSecret = false
    }

    /// Applies the journal `bytes` to `state` (read from the snapshot `snapshot`, whose account
    /// table is `table`). Throws `damaged` for a complete line that is not a change.
    static func replay(
        _ bytes: [UInt8], snapshot: String, onto state: inout BrokerState, table: inout [String: Account]
    ) throws(StateFileFormat.Failure) -> Replayed {
        var replayed = Replayed()
        var start = 0
        var number = 0
        while start < bytes.count {
            guard let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) else {
                replayed.tornBytes = bytes.count - start
                break
            }
            number += 1
            let line = Array(bytes[start..<newline])
            start = newline + 1
            do throws(JSONReader.Problem) {
                if number == 1 {
                    guard try headerSnapshot(line) == snapshot else {
                        replayed.stale = true
                        return replayed
                    }
                } else {
                    if try apply(line, to: &state, table: &table) { replayed.removedSecret = true }
                    replayed.lines += 1
                }
            } catch {
                switch error {
                case .shape(let why): throw .damaged("line \(number): \(why)")
                case .syntax(let offset): throw .damaged("line \(number): unexpected text at byte \(offset)")
                }
            }
        }
        return replayed
    }

    /// The snapshot a header line names.
    private static func headerSnapshot(_ line: [UInt8]) throws(JSONReader.Problem) -> String {
        try line.withUnsafeBufferPointer { buffer throws(JSONReader.Problem) -> String in
            var reader = JSONReader(buffer)
            let offsets = try topLevel(&reader)
            let found = try reader.at(offsets["journal"], "journal") {
                (reader: inout JSONReader) throws(JSONReader.Problem) in try reader.readInteger()
            }
            guard found == version else { throw .shape("it is a journal of format \(found ?? -1), not \(version)") }
            return try reader.at(offsets["snapshot"], "snapshot") {
                (reader: inout JSONReader) throws(JSONReader.Problem) in try reader.readString("snapshot")
            }
        }
    }

    /// One change line applied; whether it took a secret out of the state.
    private static func apply(_ line: [UInt8], to state: inout BrokerState, table: inout [String: Account])
        throws(JSONReader.Problem) -> Bool
    {
        // Only what the secrets check needs: a copy of the whole state would make the first change
        // of `clients` copy every record, once per line replayed.
        let singleSignOnBefore = state.singleSignOn
        let revocationsBefore = state.pendingRevocations
        var removed: [String] = []
        try line.withUnsafeBufferPointer { buffer throws(JSONReader.Problem) in
            var reader = JSONReader(buffer)
            let offsets = try topLevel(&reader)
            // The accounts first: this line's clients may name them.
            try StateFileFormat.readAccounts(&reader, at: offsets["accounts"], into: &table, sharing: state.current)
            let known = table
            func reference(_ reader: inout JSONReader, _ clientId: String, _ field: String) throws(JSONReader.Problem)
                -> Account?
            {
                guard let key = try reader.readStringOrNull("clients[\(clientId)].\(field)") else { return nil }
                guard let account = known[key] else {
                    throw .shape(
                        "client \"\(clientId)\" names account \"\(key)\" as its \(field), which is not in the table")
                }
                return account
            }
            if let at = offsets["clients"] {
                reader.position = at
                try reader.expect(.object, "clients")
                try reader.openObject()
                var first = true
                while let clientId = try reader.nextKey(first: first) {
                    first = false
                    let token = state.clients[clientId]?.refreshToken
                    if try reader.kind() == .null {
                        try reader.skipValue()
                        state.clients[clientId] = nil
                    } else {
                        let record = try StateFileFormat.readClient(&reader, clientId, account: reference)
                        state.clients[clientId] = record.isEmptyAtRest ? nil : record
                    }
                    if let token, state.clients[clientId]?.refreshToken == nil { removed.append(token) }
                }
            }
            if let at = offsets["cleanUpOwed"] {
                reader.position = at
                state.cleanUpOwed = try reader.kind() == .null ? false : try reader.readBool("cleanUpOwed")
            }
            if let at = offsets["current"] {
                reader.position = at
                state.current = try reader.readAccountOrNull("current")
            }
            if let at = offsets["deviceId"] {
                reader.position = at
                state.deviceId = try reader.readString("deviceId")
            }
            if let at = offsets["pendingRevocations"] {
                reader.position = at
                state.pendingRevocations =
                    try reader.kind() == .null ? [] : try StateFileFormat.readPendingRevocations(&reader)
            }
            if let at = offsets["signOutDeadline"] {
                reader.position = at
                if try reader.kind() == .null {
                    state.signOutDeadline = nil
                } else {
                    guard let deadline = try reader.readInteger() else {
                        throw .shape("signOutDeadline is not a whole number of seconds")
                    }
                    state.signOutDeadline = Int64(deadline)
                }
            }
            if let at = offsets["signedInAt"] {
                reader.position = at
                if try reader.kind() == .null {
                    state.signedInAt = nil
                } else {
                    guard let seconds = try reader.readInteger() else {
                        throw .shape("signedInAt is not a whole number of seconds")
                    }
                    state.signedInAt = Int64(seconds)
                }
            }
            if let at = offsets["handledEvents"] {
                reader.position = at
                state.handledEvents = try StateFileFormat.readStrings(&reader, "handledEvents")
            }
            if let at = offsets["signedInBoot"] {
                reader.position = at
                state.signedInBoot = try reader.readStringOrNull("signedInBoot")
            }
            if let at = offsets["singleSignOn"] {
                reader.position = at
                state.singleSignOn = try reader.kind() == .null ? [:] : try StateFileFormat.readSingleSignOn(&reader)
            }
        }
        removed += removedSecrets(singleSignOn: singleSignOnBefore, pendingRevocations: revocationsBefore, in: state)
        return removed.contains { !holds(state, $0) }
    }

    /// The whole line must be one JSON object; where each of its keys' values starts.
    private static func topLevel(_ reader: inout JSONReader) throws(JSONReader.Problem) -> [String: Int] {
        try reader.expect(.object, "the line")
        try reader.openObject()
        var offsets: [String: Int] = [:]
        var first = true
        while let key = try reader.nextKey(first: first) {
            first = false
            offsets[key] = try reader.valueStart()
            try reader.skipValue()
        }
        try reader.end()
        return offsets
    }
}
