import BrokerCore
import Foundation
import Testing

@testable import BrokerPersistence

/// The state file and its journal on a real directory, without a bus: a change costs the bytes
/// of the change, every sequence of changes reads back as it was saved, and a journal cut short,
/// left over or damaged is handled as its documentation says.
@Suite("State journal: a change is a line, read back exactly")
struct StateJournalTests {
    typealias Directory = FileStateStoreTests.Directory

    static func account(_ n: Int) -> Account {
        Account(
            username: "user\(n)@contoso.example", identifier: "oid-\(n).t", tenantId: "t",
            environment: "login.example", name: "User \(n)")
    }

    /// What of `state` is kept at rest, as a load gives it back.
    static func atRest(_ state: BrokerState) -> BrokerState { StateFileFormat.persisted(state) }

    /// A state with `count` apps that each saw `account(0)`.
    static func crowd(_ count: Int) -> BrokerState {
        var state = BrokerState(deviceId: "d-1", current: account(0))
        for n in 0..<count { state.clients["app-\(n)"] = ClientRecord(lastSeen: account(0)) }
        return state
    }

    @Test("500 random changes, each read back by a fresh load of the files exactly as saved")
    func randomChangesReadBack() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var random = SystemRandomNumberGenerator()
        var state = BrokerState(deviceId: "d-1")
        try store.save(state)
        for step in 0..<500 {
            let n = Int.random(in: 0..<30, using: &random)
            switch Int.random(in: 0..<9, using: &random) {
            case 0: state.current = Bool.random() ? Self.account(n % 5) : nil
            case 1: state.clients["app-\(n)"] = ClientRecord(lastSeen: Self.account(n % 7))
            case 2:
                state.clients["app-\(n)"] = ClientRecord(
                    lastSeen: Self.account(n), account: Self.account(n), refreshToken: "rt-\(step)",
                    accessTokens: [
                        "User.Read": CachedAccessToken(
                            accessToken: "at-\(step)", expiresOn: 1, idToken: nil, scopes: Scopes(["User.Read"]))
                    ])
            case 3 where !state.singleSignOn.values.contains { $0.anchorClientId == "app-\(n)" }:
                // As the broker does: a single sign-on grant's app keeps its record.
                state.clients["app-\(n)"] = nil
            case 3: break
            case 4:
                state.pendingRevocations =
                    Bool.random() ? [PendingRevocation(clientId: "app-\(n)", token: .refreshToken("rt-\(step)"))] : []
            case 5: state.signOutDeadline = Bool.random() ? Int64(step) : nil
            case 6:
                state.signedInBoot = Bool.random() ? "boot-\(n)" : nil
                // An id with a quote: the event's jti is the provider's text.
                state.handledEvents = Bool.random() ? Array((state.handledEvents + ["jti \"\(step)\""]).suffix(3)) : []
                state.cleanUpOwed = Bool.random()
            case 7:
                if state.clients["app-\(n)"] == nil {
                    state.clients["app-\(n)"] = ClientRecord(lastSeen: Self.account(n % 7))
                }
                state.singleSignOn =
                    Bool.random()
                    ? ["oid-\(n).t": SingleSignOnGrant(anchorClientId: "app-\(n)", family: Bool.random() ? "1" : nil)]
                    : [:]
            default:
                // An account renamed: the same identifier, another name; both stay distinct at rest.
                state.clients["app-\(n)"] = ClientRecord(
                    lastSeen: Account(
                        username: "user\(n)@contoso.example", identifier: "oid-\(n).t", tenantId: "t",
                        environment: "login.example", name: "Renamed \(step)"))
            }
            try store.save(state)
            if step % 7 == 0 { try store.sync() }
            #expect(try FileStateStore.peek(directory.path) == Self.atRest(state), "step \(step)")
        }
        try store.sync()
        #expect(try store.load() == Self.atRest(state))
    }

    @Test("with 1,000 apps known, a new app's first call appends one short line; state.json is not rewritten")
    func aChangeCostsTheChange() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(1000)
        try store.save(state)
        try store.sync()
        let snapshot = try FileManager.default.attributesOfItem(atPath: directory.stateFile)
        // A snapshot alone has no journal yet: its first line starts it.
        #expect(!FileManager.default.fileExists(atPath: directory.journal))

        state.clients["newcomer"] = ClientRecord(lastSeen: Self.account(0))
        try store.save(state)
        try store.sync()

        let journal = String(
            decoding: try #require(FileManager.default.contents(atPath: directory.journal)), as: UTF8.self)
        let lines = journal.split(separator: "\n")
        #expect(lines.count == 2 && lines.first?.hasPrefix(#"{"journal":1,"snapshot":"#) == true, "\(journal)")
        #expect(lines.last == #"{"clients":{"newcomer":{"lastSeen":"oid-0.t"}}}"#)
        let after = try FileManager.default.attributesOfItem(atPath: directory.stateFile)
        #expect(after[.systemFileNumber] as? Int == snapshot[.systemFileNumber] as? Int, "state.json was replaced")
        #expect(after[.size] as? Int == snapshot[.size] as? Int)
        #expect(try FileStateStore.peek(directory.path) == Self.atRest(state))
    }

    @Test("the journal is folded into a new snapshot once it is as large as the state file")
    func compaction() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(300)
        try store.save(state)
        var snapshots = 0
        var inode = try directory.stateFileInode()
        for step in 0..<1500 {
            state.clients["app-\(step % 300)"] = ClientRecord(lastSeen: Self.account(step))
            try store.save(state)
            let now = try directory.stateFileInode()
            if now != inode {
                snapshots += 1
                inode = now
            }
            // At most one line (under 512 bytes here) past the threshold.
            let snapshotSize = try Self.size(directory.stateFile)
            let journal = try Self.size(directory.journal)
            #expect(journal <= max(FileStateStore.minimumCompactionBytes, snapshotSize) + 512)
        }
        try store.sync()
        // About 200 bytes a line (a new account each) against 64 KiB or the file: a few hundred lines each.
        #expect((2...10).contains(snapshots), "\(snapshots) snapshots for 1,500 changes")
        #expect(try FileStateStore.peek(directory.path) == Self.atRest(state))
    }

    /// The file's size; 0 when there is none (a snapshot's journal before its first line).
    static func size(_ path: String) throws -> Int {
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        return try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? -1
    }

    @Test(
        "a last line cut short (a power loss) is dropped; the next save writes a snapshot, the next line a new journal")
    func tornLastLine() throws {
        let directory = Directory()
        var state = Self.crowd(3)
        // One store throughout: a second one in this process could find the directory's lock still
        // held by a child another test is spawning (it holds a copy of the descriptor until its exec).
        let store = try FileStateStore(directory: directory.path)
        try store.save(state)
        state.clients["app-0"] = nil
        try store.save(state)
        try store.sync()
        let handle = try #require(FileHandle(forWritingAtPath: directory.journal))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(#"{"clients":{"app-1":nu"#.utf8))
        try handle.close()

        #expect(try store.load() == Self.atRest(state))
        state.clients["app-2"] = nil
        try store.save(state)
        try store.sync()
        #expect(
            !FileManager.default.fileExists(atPath: directory.journal), "the snapshot took the torn journal with it")
        #expect(try FileStateStore.peek(directory.path) == Self.atRest(state))
        // The next change starts the new snapshot's journal.
        state.clients["app-1"] = nil
        try store.save(state)
        try store.sync()
        let journal = try String(contentsOfFile: directory.journal, encoding: .utf8)
        #expect(journal.split(separator: "\n").count == 2, "a new journal, its header and one line: \(journal)")
        #expect(try store.load() == Self.atRest(state))
    }

    @Test("a journal left from before the snapshot (a crash between the two renames) is ignored")
    func staleJournal() throws {
        let directory = Directory()
        let state = Self.crowd(2)
        let store = try FileStateStore(directory: directory.path)
        try store.save(state)
        try store.sync()
        // The journal of an earlier snapshot, with a change that snapshot's successor holds already.
        let stale = String(decoding: StateJournal.header(snapshot: "0123"), as: UTF8.self) + #"{"current":null}"# + "\n"
        try Data(stale.utf8).write(to: URL(fileURLWithPath: directory.journal))
        chmod(directory.journal, 0o600)
        #expect(try store.load() == Self.atRest(state))
    }

    @Test("a damaged line in the middle: the state cannot be used, and both files are moved aside")
    func damagedLine() throws {
        let directory = Directory()
        var state = Self.crowd(2)
        let store = try FileStateStore(directory: directory.path)
        try store.save(state)
        state.current = nil
        try store.save(state)
        try store.sync()
        var journal = try String(contentsOfFile: directory.journal, encoding: .utf8)
        journal = journal.replacingOccurrences(of: #""current":null"#, with: #""current":"alice""#)
        try Data(journal.utf8).write(to: URL(fileURLWithPath: directory.journal))
        chmod(directory.journal, 0o600)
        do {
            _ = try store.load()
            Issue.record("a damaged journal was used")
        } catch {
            #expect("\(error)".contains("state.journal is damaged: line 2"), "\(error)")
        }
        _ = store.quarantine()
        let names = directory.names()
        #expect(
            names.contains { $0.hasPrefix("state.json.broken-") }
                && names.contains { $0.hasPrefix("state.journal.broken-") })
        #expect(!names.contains("state.json") && !names.contains("state.journal"))
    }

    @Test("compact (a clean stop): state.json alone holds the state, as an older brokerd reads it")
    func compactForOlderBrokerd() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(5)
        try store.save(state)
        state.clients["app-9"] = ClientRecord(lastSeen: Self.account(9), account: Self.account(9), refreshToken: "rt")
        try store.save(state)
        try store.compact()
        let alone = try StateFileFormat.decode(
            Array(try #require(FileManager.default.contents(atPath: directory.stateFile))))
        #expect(alone.state == Self.atRest(state))
        // Nothing to fold in: a second compact writes nothing.
        let inode = try directory.stateFileInode()
        try store.compact()
        #expect(
            try directory.stateFileInode() == inode)
    }

    @Test("after a start that replayed lines, the next change is a line, and a clean stop folds all into state.json")
    func aLoadGoesOnWithLines() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(4)
        try store.save(state)
        state.clients["app-9"] = ClientRecord(lastSeen: Self.account(9))
        try store.save(state)
        try store.sync()
        // A restart: the state is read back, lines and all.
        #expect(try store.load() == Self.atRest(state))
        let inode = try directory.stateFileInode()
        state.clients["app-10"] = ClientRecord(lastSeen: Self.account(10))
        try store.save(state)
        try store.sync()
        #expect(
            try directory.stateFileInode() == inode,
            "the first change after the start rewrote state.json")
        // A restart that changes nothing, then a clean stop: state.json alone holds every line.
        #expect(try store.load() == Self.atRest(state))
        try store.compact()
        let alone = try StateFileFormat.decode(
            Array(try #require(FileManager.default.contents(atPath: directory.stateFile))))
        #expect(alone.state == Self.atRest(state))
    }

    @Test("a journal of another user's, or readable by others, is refused like the state file")
    func unsafeJournal() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(1)
        try store.save(state)
        state.current = nil
        try store.save(state)
        try store.sync()
        chmod(directory.journal, 0o644)
        do {
            _ = try store.load()
            Issue.record("a journal others can read was used")
        } catch {
            #expect("\(error)".contains("state.journal has mode 644"), "\(error)")
        }
    }
}

extension StateJournalTests {
    @Test("refresh tokens removed for good leave both files at the sync: no earlier line keeps them")
    func removedSecretsLeaveTheFiles() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(3)
        try store.save(state)
        state.clients["mail"] = ClientRecord(lastSeen: Self.account(0), account: Self.account(0), refreshToken: "rt-1")
        try store.save(state)
        state.clients["mail"]?.refreshToken = "rt-2"
        try store.save(state)
        #expect(directory.text().contains("rt-1") && directory.text().contains("rt-2"), "a rotation is a line")

        state.clients["mail"] = ClientRecord(lastSeen: Self.account(0))
        try store.save(state)
        try store.sync()
        #expect(!directory.text().contains("rt-1") && !directory.text().contains("rt-2"), "\(directory.text())")
        #expect(try FileStateStore.peek(directory.path) == Self.atRest(state))
    }

    @Test("a sign-out is one line before the apps hear of it; a crash before its sync: the start removes the token")
    func signOutIsALineAndACrashBeforeTheSync() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(3)
        try store.save(state)
        try store.sync()
        state.clients["mail"] = ClientRecord(lastSeen: Self.account(0), account: Self.account(0), refreshToken: "rt-1")
        try store.save(state)
        try store.sync()
        let snapshot = try directory.stateFileInode()
        let journalBefore = try Self.size(directory.journal)

        state.clients["mail"] = ClientRecord(lastSeen: Self.account(0))
        try store.save(state)
        #expect(try directory.stateFileInode() == snapshot, "state.json was not replaced")
        let journal = try String(contentsOfFile: directory.journal, encoding: .utf8)
        #expect(try Self.size(directory.journal) > journalBefore && journal.hasSuffix("\n"), "one line appended")
        // brokerd dies here: the sync, whose snapshot takes the token out of the files, never comes.
        #expect(journal.contains("rt-1"))

        // The next start reads the files afresh (one store holds the directory's lock).
        #expect(try store.load() == Self.atRest(state))
        #expect(try directory.stateFileInode() != snapshot, "the start wrote a snapshot")
        #expect(!directory.text().contains("rt-1"), "\(directory.text())")
        #expect(try store.load() == Self.atRest(state))
    }

    @Test("the broker's sign-out moves the token to the revocations owed: a line, and no snapshot at its sync")
    func signOutOwingARevocationWritesNoSnapshot() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(3)
        state.clients["mail"] = ClientRecord(lastSeen: Self.account(0), account: Self.account(0), refreshToken: "rt-1")
        try store.save(state)
        try store.sync()
        state.clients["notes"] = ClientRecord(lastSeen: Self.account(1))
        try store.save(state)
        try store.sync()
        let snapshot = try directory.stateFileInode()

        state.clients["mail"] = ClientRecord(lastSeen: Self.account(0))
        state.pendingRevocations = [PendingRevocation(clientId: "mail", token: .refreshToken("rt-1"))]
        try store.save(state)
        try store.sync()
        #expect(try directory.stateFileInode() == snapshot, "the token is still held (owed a revocation): no purge")

        // A rotation is not a removal either: a start that replays it writes no snapshot.
        state.clients["notes"] = ClientRecord(lastSeen: Self.account(1), account: Self.account(1), refreshToken: "n-1")
        try store.save(state)
        state.clients["notes"]?.refreshToken = "n-2"
        try store.save(state)
        try store.sync()
        #expect(try store.load() == Self.atRest(state))
        #expect(try directory.stateFileInode() == snapshot)

        // The revocation is settled (not as revoked: see `save(_:revoked:)`): the token is held
        // nowhere. A line, then the sync's snapshot.
        state.pendingRevocations = []
        try store.save(state)
        #expect(try directory.stateFileInode() == snapshot, "a line")
        try store.sync()
        let purged = try directory.stateFileInode()
        #expect(purged != snapshot && !directory.text().contains("rt-1"), "\(directory.text())")

        // The same when brokerd dies before the sync: the start writes the snapshot.
        state.pendingRevocations = [PendingRevocation(clientId: "notes", token: .refreshToken("n-2"))]
        state.clients["notes"] = ClientRecord(lastSeen: Self.account(1))
        try store.save(state)
        try store.sync()
        #expect(try directory.stateFileInode() == purged, "a sign-out that owes the revocation: a line")
        state.pendingRevocations = []
        try store.save(state)
        #expect(directory.text().contains("n-2"))
        #expect(try store.load() == Self.atRest(state))
        #expect(try directory.stateFileInode() != purged && !directory.text().contains("n-2"), "\(directory.text())")
    }

    @Test("a device secret removed for good (its grant ended, nothing owed) leaves the files at the sync")
    func removedDeviceSecretIsPurged() throws {
        let directory = Directory()
        let store = try FileStateStore(directory: directory.path)
        var state = Self.crowd(2)
        try store.save(state)
        try store.sync()
        state.singleSignOn["alice"] = SingleSignOnGrant(
            anchorClientId: "app-0", deviceSecret: DeviceSecret(secret: "ds-1", idToken: "id-1"))
        try store.save(state)
        try store.sync()
        #expect(directory.text().contains("ds-1"))
        state.singleSignOn = [:]
        try store.save(state)
        #expect(directory.text().contains("ds-1"), "the line is written first")
        try store.sync()
        #expect(!directory.text().contains("ds-1"), "\(directory.text())")
        #expect(try store.load() == Self.atRest(state))
    }
}
