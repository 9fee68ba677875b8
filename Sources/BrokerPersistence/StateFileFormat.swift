import BrokerCore
import Glibc
import JSON

/// The state file's format (`state.json`): what of a `BrokerState` is kept at rest, and how.
///
/// Version 2 (written since the access tokens stopped being kept at rest):
///
/// ```json
/// {"accounts": {"<key>": {"environment": …, "identifier": …, "name": …, "tenantId": …, "username": …}},
///  "clients": {"<clientId>": {"account": "<key>", "lastSeen": "<key>", "refreshToken": "…"}},
///  "current": {"environment": …, "identifier": …, …},
///  "deviceId": "…",
///  "pendingRevocations": [{"clientId": "…", "kind": "refresh_token", "token": "…"}],
///  "singleSignOn": {"<identifier>": {"anchor": "<clientId>", "family": "1", "deviceSecret": "…", "idToken": "…"}},
///  "version": 2}
/// ```
///
/// Each distinct account is written once, in `accounts`, under its `identifier` (followed by
/// `#1`, `#2`, … for a second account of the same identifier, such as the same person under an
/// older name); a client names its `lastSeen` and `account` by that key. `refreshToken` is there
/// only with `--token-storage plaintext-file` (other storages remove it before the file store
/// sees the state). Access tokens and the ID tokens that came with them are never written: they
/// are short-lived, and after a restart an app's first silent call refreshes them. Client records
/// with nothing left to keep are left out. Keys are written sorted, so a state always gives the
/// same bytes.
///
/// `singleSignOn` (optional) holds, per account identifier, the sign-in other apps build on: the
/// app that made it, its family, and with `--token-storage plaintext-file` only, Native SSO's
/// device secret and ID token. An older brokerd of version 2 skips it, as it skips any key it does
/// not know, and loses only single sign-on until the next sign-in.
///
/// `signOutDeadline` (optional, unix seconds) is when an inactivity warning in progress signs the
/// device out. `signedInBoot` (optional) is the kernel's boot id when the device's sign-in was made
/// (`signOutAfterReboot`), `signedInAt` (optional, unix seconds) when; an older brokerd skips both.
/// `handledEvents` (optional) lists the ids of the provider's last events brokerd acted on, so
/// that one delivered again after a restart changes nothing; an older brokerd skips it.
/// `cleanUpOwed` (optional, `true` when present) says a sign-out was written and the
/// administrator's `clearOnSignOut` not yet done since: the next start does it before anyone is
/// served. An older brokerd skips it (and does not do it).
///
/// `pendingRevocations` (optional, with `--token-storage plaintext-file` only: they are secrets)
/// lists the tokens of ended sign-ins that the provider has not yet confirmed revoked, oldest
/// first; `kind` is `refresh_token` or `device_secret`. An older brokerd skips it and forgets them.
///
/// Version 1 (read, never written): `lastSeen` and `account` were whole account objects in each
/// client, and each client had `accessTokens`; those are dropped on load.
enum StateFileFormat {
    /// The format this build writes; a file with a newer one is refused rather than misread.
    static let currentVersion = 2

    /// What a load found besides the state.
    struct Loaded {
        var state: BrokerState
        var version: Int
        /// Access tokens the file held (version 1) and that were not kept.
        var droppedAccessTokens: Int
        /// The file's account table (version 2), which the journal's lines name accounts by.
        var accounts: [String: Account] = [:]
        /// The journal that holds the changes made after the file was written (`journal`), if any.
        var journal: String?
    }

    /// Why bytes are not a usable state file; `FileStateStore` words it with the path.
    enum Failure: Error {
        /// Not JSON at all (or cut short).
        case notJSON
        /// JSON, but without a format version.
        case noVersion
        case newer(Int)
        /// The right version, a body that does not fit it.
        case damaged(String)
    }

    // MARK: What is kept

    /// The part of `state` that is kept at rest: without access tokens, and without the client
    /// records that then hold nothing. Two states that give the same value write the same file.
    static func persisted(_ state: BrokerState) -> BrokerState {
        var kept = state
        for (clientId, record) in state.clients where !record.accessTokens.isEmpty || record.isEmptyAtRest {
            if record.isEmptyAtRest {
                kept.clients[clientId] = nil
            } else {
                kept.clients[clientId]?.accessTokens = [:]
            }
        }
        return kept
    }

    // MARK: Writing

    /// The version 2 file of `state` (its persisted part: access tokens are left out), naming the
    /// journal (`StateJournal`) that holds the changes made after it; with the keys it gave the
    /// accounts, which the journal's lines go on using.
    static func encode(_ state: BrokerState, journal: String? = nil) -> (bytes: [UInt8], keys: AccountKeys) {
        var keys = AccountKeys()
        // One pass over the clients, in order: their text goes to a buffer of its own, since the
        // table (written first) is known only once every client has been seen.
        var clients = JSONWriter(capacity: state.clients.count * 160)
        clients.raw("{")
        var first = true
        for (clientId, record) in state.clients.sorted(by: { $0.key < $1.key }) where !record.isEmptyAtRest {
            if !first { clients.raw(",") }
            first = false
            clients.string(clientId)
            clients.raw(":")
            clients.client(record, keys: &keys)
        }
        clients.raw("}")

        var out = JSONWriter(capacity: clients.bytes.count + 256 + keys.table.count * 256)
        out.raw("{\"accounts\":")
        out.accounts(Array(keys.table.keys), of: keys.table)
        if state.cleanUpOwed { out.raw(",\"cleanUpOwed\":true") }
        out.raw(",\"clients\":")
        out.bytes.append(contentsOf: clients.bytes)
        if let current = state.current {
            out.raw(",\"current\":")
            out.account(current)
        }
        out.raw(",\"deviceId\":")
        out.string(state.deviceId)
        if !state.handledEvents.isEmpty {
            out.raw(",\"handledEvents\":")
            out.strings(state.handledEvents)
        }
        if let journal {
            out.raw(",\"journal\":")
            out.string(journal)
        }
        if !state.pendingRevocations.isEmpty {
            out.raw(",\"pendingRevocations\":")
            out.pendingRevocations(state.pendingRevocations)
        }
        if let deadline = state.signOutDeadline {
            out.raw(",\"signOutDeadline\":\(deadline)")
        }
        if let at = state.signedInAt {
            out.raw(",\"signedInAt\":\(at)")
        }
        if let boot = state.signedInBoot {
            out.raw(",\"signedInBoot\":")
            out.string(boot)
        }
        if !state.singleSignOn.isEmpty {
            out.raw(",\"singleSignOn\":")
            out.singleSignOn(state.singleSignOn)
        }
        out.raw(",\"version\":\(currentVersion)}")
        return (out.bytes, keys)
    }

    /// The keys of a file's account table: every distinct account once, under its identifier
    /// (followed by `#1`, `#2`, … when that is taken by another account).
    struct AccountKeys {
        private(set) var table: [String: Account] = [:]
        private var keys: [Account: String] = [:]
        private var last: (account: Account, key: String)?
        /// Keys given since the last ``takeAdded()``.
        private var added: [String] = []

        init() {}

        /// The keys given since the last call, which a journal line must write with their accounts.
        mutating func takeAdded() -> [String] {
            defer { added = [] }
            return added
        }

        /// The table a file was read with.
        init(table: [String: Account]) {
            self.table = table
            for (key, account) in table where keys[account] == nil { keys[account] = key }
        }

        /// The key of `account`, given one (`isNew`) when the table has none.
        mutating func key(for account: Account) -> (key: String, isNew: Bool) {
            if let last, last.account == account { return (last.key, false) }
            if let known = keys[account] {
                last = (account, known)
                return (known, false)
            }
            var candidate = account.identifier
            var suffix = 1
            while table[candidate] != nil {
                candidate = "\(account.identifier)#\(suffix)"
                suffix += 1
            }
            keys[account] = candidate
            table[candidate] = account
            added.append(candidate)
            last = (account, candidate)
            return (candidate, true)
        }
    }

    // MARK: Reading

    /// The state in `bytes`, a state file of version 1 or 2.
    ///
    /// Read with `JSONReader` rather than `JSONDecoder`: at 10,000 clients the decoder's
    /// containers (a dictionary per object) took 50 to 120 ms of brokerd's start and left
    /// megabytes of heap behind. Two passes: the first checks the whole text's syntax and finds
    /// the version and where each top-level value starts; the second reads the values the
    /// version defines (the account table before the clients, whatever their order).
    static func decode(_ bytes: [UInt8]) throws(Failure) -> Loaded {
        try bytes.withUnsafeBufferPointer { buffer throws(Failure) -> Loaded in
            var reader = JSONReader(buffer)
            let (version, offsets) = try header(&reader)
            guard version <= currentVersion else { throw .newer(version) }
            guard version >= 1 else { throw .damaged("its format version is \(version); versions start at 1") }
            do throws(JSONReader.Problem) {
                return version == 1 ? try version1(&reader, offsets, version: version) : try version2(&reader, offsets)
            } catch {
                switch error {
                case .shape(let why): throw .damaged(why)
                case .syntax(let offset): throw .damaged("unexpected text at byte \(offset)")
                }
            }
        }
    }

    /// The first pass: the whole text must be JSON; a top-level object with an integer `version`.
    private static func header(_ reader: inout JSONReader) throws(Failure) -> (version: Int, offsets: [String: Int]) {
        var version: Int?
        var offsets: [String: Int] = [:]
        var isObject = false
        do {
            if try reader.kind() == .object {
                isObject = true
                try reader.openObject()
                var first = true
                while let key = try reader.nextKey(first: first) {
                    first = false
                    offsets[key] = try reader.valueStart()
                    if key == "version", try reader.kind() == .number {
                        version = try reader.readInteger()
                    } else {
                        try reader.skipValue()
                    }
                }
            } else {
                try reader.skipValue()
            }
            try reader.end()
        } catch {
            // JSON whose top-level key breaks the outside-text rule is damaged, not "not JSON".
            if case .shape(let why) = error { throw .damaged(why) }
            throw .notJSON
        }
        guard isObject, let version else { throw .noVersion }
        return (version, offsets)
    }

    private static func version2(_ reader: inout JSONReader, _ offsets: [String: Int]) throws(JSONReader.Problem)
        -> Loaded
    {
        let deviceId = try reader.at(offsets["deviceId"], "deviceId") {
            (reader: inout JSONReader) throws(JSONReader.Problem) in
            try reader.readString("deviceId")
        }
        let current =
            try reader.at(offsets["current"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readAccountOrNull("current")
            } ?? nil

        var table: [String: Account] = [:]
        try readAccounts(&reader, at: offsets["accounts"], into: &table, sharing: current)

        // Most clients name the same account: compare the key's bytes with the last one before making a String of them.
        var last: (key: Range<Int>, account: Account)?
        func reference(_ reader: inout JSONReader, _ clientId: String, _ field: String) throws(JSONReader.Problem)
            -> Account?
        {
            if try reader.kind() == .null {
                try reader.skipValue()
                return nil
            }
            try reader.expect(.string, "clients[\(clientId)].\(field)")
            let (range, escaped) = try reader.stringRange()
            if !escaped, let last, reader.equalBytes(last.key, range) { return last.account }
            let key = try reader.makeString(range, escaped: escaped)
            guard let account = table[key] else {
                throw .shape(
                    "client \"\(clientId)\" names account \"\(key)\" as its \(field), and the accounts table has no "
                        + "such entry"
                )
            }
            if !escaped { last = (range, account) }
            return account
        }
        let clients = try readClients(&reader, at: offsets["clients"], account: reference)
        let journal =
            try reader.at(offsets["journal"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readString("journal")
            }
        let singleSignOn = try reader.at(offsets["singleSignOn"], readSingleSignOn) ?? [:]
        // brokerd keeps the record of every grant's app (its refresh token is what family and
        // token-exchange single sign-on present): a grant naming an app the file does not hold
        // was not written by it.
        for (identifier, grant) in singleSignOn.sorted(by: { $0.key < $1.key })
        where clients[grant.anchorClientId] == nil {
            throw .shape(
                "singleSignOn[\(identifier)] names the app \(grant.anchorClientId), "
                    + "which the file's clients do not hold")
        }
        let owed = try reader.at(offsets["pendingRevocations"], readPendingRevocations) ?? []
        let boot =
            try reader.at(offsets["signedInBoot"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readStringOrNull("signedInBoot")
            } ?? nil
        let deadline =
            try reader.at(offsets["signOutDeadline"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readInteger()
            } ?? nil
        let signedInAt =
            try reader.at(offsets["signedInAt"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readInteger()
            } ?? nil
        let handled = try reader.at(offsets["handledEvents"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
            try readStrings(&reader, "handledEvents")
        }
        let cleanUpOwed =
            try reader.at(offsets["cleanUpOwed"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readBool("cleanUpOwed")
            } ?? false
        return Loaded(
            state: BrokerState(
                deviceId: deviceId, current: current, clients: clients, singleSignOn: singleSignOn,
                pendingRevocations: owed, signedInBoot: boot, signOutDeadline: deadline.map(Int64.init),
                signedInAt: signedInAt.map(Int64.init), handledEvents: handled ?? [], cleanUpOwed: cleanUpOwed),
            version: 2, droppedAccessTokens: 0, accounts: table, journal: journal)
    }

    /// The `accounts` table at `offset` (if any), each entry added to `table`. One Account value
    /// per entry, the same as `current` where equal: every client naming it shares its strings.
    static func readAccounts(
        _ reader: inout JSONReader, at offset: Int?, into table: inout [String: Account],
        sharing current: Account? = nil
    ) throws(JSONReader.Problem) {
        guard let offset else { return }
        reader.position = offset
        try reader.expect(.object, "accounts")
        try reader.openObject()
        var first = true
        while let key = try reader.nextKey(first: first) {
            first = false
            let account = try reader.readAccount("accounts[\(key)]")
            table[key] = current.flatMap { $0 == account ? $0 : nil } ?? account
        }
    }

    /// The `pendingRevocations` array: objects with `clientId`, `kind` and `token`, all required.
    /// An array of strings at `path` (null: none).
    static func readStrings(_ reader: inout JSONReader, _ path: String) throws(JSONReader.Problem) -> [String] {
        if try reader.kind() == .null {
            try reader.skipValue()
            return []
        }
        try reader.expect(.array, path)
        try reader.openArray()
        var strings: [String] = []
        var first = true
        while try reader.nextElement(first: first) {
            first = false
            strings.append(try reader.readString("\(path)[\(strings.count)]"))
        }
        return strings
    }

    static func readPendingRevocations(_ reader: inout JSONReader) throws(JSONReader.Problem)
        -> [PendingRevocation]
    {
        try reader.expect(.array, "pendingRevocations")
        try reader.openArray()
        var owed: [PendingRevocation] = []
        var first = true
        while try reader.nextElement(first: first) {
            let path = "pendingRevocations[\(owed.count)]"
            first = false
            try reader.expect(.object, path)
            try reader.openObject()
            var fields: [String: String] = [:]
            var firstField = true
            while let field = try reader.nextKey(first: firstField) {
                firstField = false
                switch field {
                case "clientId", "kind", "token": fields[field] = try reader.readString("\(path).\(field)")
                default: try reader.skipValue()
                }
            }
            guard let clientId = fields["clientId"], let kind = fields["kind"], let value = fields["token"] else {
                throw .shape("\(path) lacks its clientId, kind or token")
            }
            guard let token = RevocableToken(kind: kind, value: value) else {
                throw .shape("\(path) has the kind \(kind), which is neither refresh_token nor device_secret")
            }
            owed.append(PendingRevocation(clientId: clientId, token: token))
        }
        return owed
    }

    /// The `singleSignOn` object: per account identifier, `anchor` (required), `family`, and
    /// `deviceSecret` with `idToken` (both or neither).
    static func readSingleSignOn(_ reader: inout JSONReader) throws(JSONReader.Problem) -> [String:
        SingleSignOnGrant]
    {
        try reader.expect(.object, "singleSignOn")
        try reader.openObject()
        var grants: [String: SingleSignOnGrant] = [:]
        var first = true
        while let identifier = try reader.nextKey(first: first) {
            first = false
            let path = "singleSignOn[\(identifier)]"
            try reader.expect(.object, path)
            try reader.openObject()
            var anchor: String?
            var family: String?
            var secret: String?
            var idToken: String?
            var firstField = true
            while let field = try reader.nextKey(first: firstField) {
                firstField = false
                switch field {
                case "anchor": anchor = try reader.readString("\(path).anchor")
                case "family": family = try reader.readStringOrNull("\(path).family")
                case "deviceSecret": secret = try reader.readStringOrNull("\(path).deviceSecret")
                case "idToken": idToken = try reader.readStringOrNull("\(path).idToken")
                default: try reader.skipValue()
                }
            }
            guard let anchor else { throw .shape("\(path) names no anchor") }
            guard (secret == nil) == (idToken == nil) else {
                throw .shape(
                    "\(path) has a device secret without its ID token, or an ID token without its device secret")
            }
            let deviceSecret = secret.flatMap { secret in idToken.map { DeviceSecret(secret: secret, idToken: $0) } }
            grants[identifier] = SingleSignOnGrant(anchorClientId: anchor, deviceSecret: deviceSecret, family: family)
        }
        return grants
    }

    private static func version1(_ reader: inout JSONReader, _ offsets: [String: Int], version: Int) throws(JSONReader
        .Problem) -> Loaded
    {
        let deviceId = try reader.at(offsets["deviceId"], "deviceId") {
            (reader: inout JSONReader) throws(JSONReader.Problem) in
            try reader.readString("deviceId")
        }
        // Each client had its own copies of its accounts: equal ones become one value, shared.
        var shared: [Account: Account] = [:]
        var last: Account?
        func intern(_ account: Account?) -> Account? {
            guard let account else { return nil }
            if let last, last == account { return last }
            let kept = shared[account] ?? account
            shared[account] = kept
            last = kept
            return kept
        }
        let current = intern(
            try reader.at(offsets["current"]) { (reader: inout JSONReader) throws(JSONReader.Problem) in
                try reader.readAccountOrNull("current")
            } ?? nil)

        var dropped = 0
        func wholeAccount(_ reader: inout JSONReader, _ clientId: String, _ field: String) throws(JSONReader.Problem)
            -> Account?
        {
            intern(try reader.readAccountOrNull("clients[\(clientId)].\(field)"))
        }
        func accessTokens(_ reader: inout JSONReader, _ field: (Range<Int>, escaped: Bool)) throws(JSONReader.Problem)
            -> Bool
        {
            guard reader.key(field, is: "accessTokens"), try reader.kind() == .object else { return false }
            // Counted, never read: they are not kept.
            try reader.openObject()
            var firstToken = true
            while try reader.nextKeyRange(first: firstToken) != nil {
                firstToken = false
                dropped += 1
                try reader.skipValue()
            }
            return true
        }
        let clients = try readClients(&reader, at: offsets["clients"], account: wholeAccount, other: accessTokens)
        return Loaded(
            state: BrokerState(deviceId: deviceId, current: current, clients: clients), version: version,
            droppedAccessTokens: dropped)
    }

    /// The `clients` object of either version: per client its `lastSeen` and `account` (read with
    /// `account`: a table key in version 2, a whole account in version 1) and its `refreshToken`.
    /// `other` may read any other field (returning true); the rest are skipped. Records that hold
    /// nothing kept at rest are left out.
    private static func readClients(
        _ reader: inout JSONReader, at offset: Int?,
        account: (inout JSONReader, _ clientId: String, _ field: String) throws(JSONReader.Problem) -> Account?,
        other: (inout JSONReader, _ field: (Range<Int>, escaped: Bool)) throws(JSONReader.Problem) -> Bool = { _, _ in
            false
        }
    ) throws(JSONReader.Problem) -> [String: ClientRecord] {
        guard let offset else { throw .shape("it has no clients") }
        reader.position = offset
        try reader.expect(.object, "clients")
        try reader.openObject()
        var clients: [String: ClientRecord] = [:]
        var first = true
        while let clientId = try reader.nextKey(first: first) {
            first = false
            let record = try readClient(&reader, clientId, account: account, other: other)
            if !record.isEmptyAtRest { clients[clientId] = record }
        }
        return clients
    }

    /// One client's record (an object) of either version; see ``readClients``.
    static func readClient(
        _ reader: inout JSONReader, _ clientId: String,
        account: (inout JSONReader, _ clientId: String, _ field: String) throws(JSONReader.Problem) -> Account?,
        other: (inout JSONReader, _ field: (Range<Int>, escaped: Bool)) throws(JSONReader.Problem) -> Bool = { _, _ in
            false
        }
    ) throws(JSONReader.Problem) -> ClientRecord {
        try reader.expect(.object, "clients[\(clientId)]")
        try reader.openObject()
        var record = ClientRecord()
        var firstField = true
        while let field = try reader.nextKeyRange(first: firstField) {
            firstField = false
            if reader.key(field, is: "lastSeen") {
                record.lastSeen = try account(&reader, clientId, "lastSeen")
            } else if reader.key(field, is: "account") {
                record.account = try account(&reader, clientId, "account")
            } else if reader.key(field, is: "refreshToken") {
                record.refreshToken = try reader.readStringOrNull("clients[\(clientId)].refreshToken")
            } else if try !other(&reader, field) {
                try reader.skipValue()
            }
        }
        return record
    }
}

extension ClientRecord {
    /// Whether the record holds nothing that is kept at rest (access tokens are not).
    var isEmptyAtRest: Bool { lastSeen == nil && account == nil && refreshToken == nil }
}

extension JSONWriter {
    /// The entries `keys` of an account table, as an object, keys sorted.
    mutating func accounts(_ keys: [String], of table: [String: Account]) {
        raw("{")
        for (index, key) in keys.sorted().enumerated() {
            if index > 0 { raw(",") }
            string(key)
            raw(":")
            if let entry = table[key] { account(entry) }
        }
        raw("}")
    }

    /// A client's record at rest: its accounts by their table keys, and its refresh token.
    mutating func client(_ record: ClientRecord, keys: inout StateFileFormat.AccountKeys) {
        raw("{")
        var fields = 0
        func field(_ name: StaticString, _ value: String?) {
            guard let value else { return }
            if fields > 0 { raw(",") }
            fields += 1
            raw(name)
            string(value)
        }
        field("\"account\":", record.account.map { keys.key(for: $0).key })
        field("\"lastSeen\":", record.lastSeen.map { keys.key(for: $0).key })
        field("\"refreshToken\":", record.refreshToken)
        raw("}")
    }

    mutating func pendingRevocations(_ owed: [PendingRevocation]) {
        raw("[")
        for (index, revocation) in owed.enumerated() {
            raw(index > 0 ? ",{\"clientId\":" : "{\"clientId\":")
            string(revocation.clientId)
            raw(",\"kind\":")
            string(revocation.token.kind)
            raw(",\"token\":")
            string(revocation.token.value)
            raw("}")
        }
        raw("]")
    }

    mutating func singleSignOn(_ grants: [String: SingleSignOnGrant]) {
        raw("{")
        for (index, (identifier, grant)) in grants.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { raw(",") }
            string(identifier)
            raw(":{\"anchor\":")
            string(grant.anchorClientId)
            if let secret = grant.deviceSecret {
                raw(",\"deviceSecret\":")
                string(secret.secret)
            }
            if let family = grant.family {
                raw(",\"family\":")
                string(family)
            }
            if let secret = grant.deviceSecret {
                raw(",\"idToken\":")
                string(secret.idToken)
            }
            raw("}")
        }
        raw("}")
    }
}

/// The state file's strings: what brokerd reads back meets the outside-text rule (no control
/// character but tab, escaped or not), as everything it kept did when it came in.
extension JSONReader {
    /// The string of a range `stringRange` gave, its escapes decoded; it must be valid UTF-8 and
    /// meet the outside-text rule.
    fileprivate func makeString(_ range: Range<Int>, escaped: Bool) throws(Problem) -> String {
        let string = try decodeString(range, escaped: escaped)
        // brokerd writes no string the rule refuses (what it keeps met the rule as it came in),
        // so a file holding one, such as "\u0000" in a name, is not brokerd's writing. Kept, it
        // would reach the bus, where libdbus refuses a NUL and with it every app's reply.
        do {
            try OutsideText.check(string)
        } catch {
            throw .shape("the string at byte \(range.lowerBound) holds \(error), which brokerd never writes")
        }
        return string
    }

    /// The next key of the object being read (its value comes next), or nil at its end.
    mutating func nextKey(first: Bool) throws(Problem) -> String? {
        guard let (range, escaped) = try nextKeyRange(first: first) else { return nil }
        return try makeString(range, escaped: escaped)
    }

    mutating func readString(_ path: String) throws(Problem) -> String {
        try expect(.string, path)
        let (range, escaped) = try stringRange()
        return try makeString(range, escaped: escaped)
    }

    mutating func readStringOrNull(_ path: String) throws(Problem) -> String? {
        if try kind() == .null {
            try skipValue()
            return nil
        }
        return try readString(path)
    }

    /// An account object: `username`, `identifier`, `tenantId`, `environment` and `name`, all strings.
    mutating func readAccount(_ path: String) throws(Problem) -> Account {
        try expect(.object, path)
        try openObject()
        var username: String?
        var identifier: String?
        var tenantId: String?
        var environment: String?
        var name: String?
        var first = true
        while let key = try nextKey(first: first) {
            first = false
            switch key {
            case "username": username = try readString("\(path).username")
            case "identifier": identifier = try readString("\(path).identifier")
            case "tenantId": tenantId = try readString("\(path).tenantId")
            case "environment": environment = try readString("\(path).environment")
            case "name": name = try readString("\(path).name")
            default: try skipValue()
            }
        }
        guard let username, let identifier, let tenantId, let environment, let name else {
            let missing = [
                ("username", username), ("identifier", identifier), ("tenantId", tenantId),
                ("environment", environment),
                ("name", name),
            ].filter { $0.1 == nil }.map(\.0)
            throw .shape("\(path) has no \(missing.joined(separator: ", "))")
        }
        return Account(
            username: username, identifier: identifier, tenantId: tenantId, environment: environment, name: name)
    }

    mutating func readAccountOrNull(_ path: String) throws(Problem) -> Account? {
        if try kind() == .null {
            try skipValue()
            return nil
        }
        return try readAccount(path)
    }
}

extension JSONWriter {
    /// An account object, keys sorted (the shape `Account`'s `Codable` reads).
    mutating func account(_ account: Account) {
        raw("{\"environment\":")
        string(account.environment)
        raw(",\"identifier\":")
        string(account.identifier)
        raw(",\"name\":")
        string(account.name)
        raw(",\"tenantId\":")
        string(account.tenantId)
        raw(",\"username\":")
        string(account.username)
        raw("}")
    }
}
