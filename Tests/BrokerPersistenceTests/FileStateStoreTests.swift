import BrokerCore
import CoreFakes
import Foundation
import Locking
import Logging
import Synchronization
import Testing

@testable import BrokerPersistence

/// The state file when the file system fails: each system call the store makes is made to fail
/// (a full disk, a dying device) through ``SystemCalls``, on a real directory, without a bus.
@Suite("State file: failing writes, renames and flushes change nothing they should not")
struct FileStateStoreTests {
    static let alice = Account(
        username: "alice@contoso.example", identifier: "oid-a.t", tenantId: "t",
        environment: "login.example", name: "Alice")

    /// A fresh state directory, removed when the test ends.
    final class Directory: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "state-\(UUID().uuidString)"
        deinit { try? FileManager.default.removeItem(atPath: path) }
        var stateFile: String { path + "/state.json" }
        var journal: String { path + "/state.journal" }
        func names() -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: path))?.sorted() ?? [] }
        /// The bytes of the state file and of its journal.
        func bytes() -> [Data?] { [stateFile, journal].map { FileManager.default.contents(atPath: $0) } }
        /// Both files' text, one after the other (a missing file is empty): where a secret is looked for.
        func text() -> String { bytes().compactMap { $0 }.map { String(decoding: $0, as: UTF8.self) }.joined() }
        /// The state file's inode: it changes when a snapshot is renamed over the file.
        func stateFileInode() throws -> Int? {
            try FileManager.default.attributesOfItem(atPath: stateFile)[.systemFileNumber] as? Int
        }
    }

    static func state(current: Account?, refreshToken: String = "rt-1") -> BrokerState {
        BrokerState(
            deviceId: "d-1", current: current,
            clients: ["mail": ClientRecord(lastSeen: current, account: current, refreshToken: refreshToken)])
    }

    /// A change is a line appended to the journal; after a start that found the journal cut short
    /// (and at a clean stop) it is a new snapshot: a temporary file renamed over state.json, and a
    /// new journal.
    @Test(arguments: [
        (SystemCalls.Call.write, ENOSPC, false), (.write, ENOSPC, true), (.rename, EIO, true), (.open, EMFILE, true),
    ])
    func aFailedSaveLeavesTheFilesAsTheyWere(call: SystemCalls.Call, code: Int32, snapshot: Bool) throws {
        let directory = Directory()
        let failing = Atomic(false)
        let store = try FileStateStore(
            directory: directory.path,
            system: SystemCalls.system.failing(call, with: code) { failing.load(ordering: .relaxed) })
        try store.save(Self.state(current: Self.alice))
        try store.sync()
        if snapshot {
            // A line in the journal, cut short by a power loss, then a start: the next save writes a snapshot.
            try store.save(Self.state(current: Self.alice, refreshToken: "rt-2"))
            try store.sync()
            let handle = try #require(FileHandle(forWritingAtPath: directory.journal))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(#"{"current":nu"#.utf8))
            try handle.close()
            #expect(try store.load() == Self.state(current: Self.alice, refreshToken: "rt-2"))
        }
        let before = directory.bytes()
        let names = directory.names()

        failing.store(true, ordering: .relaxed)
        #expect(throws: StoreError.self) { try store.save(Self.state(current: nil)) }
        #expect(directory.bytes() == before)
        // No temporary file is left behind, and the lock stays.
        #expect(directory.names() == names)
        #expect(names.contains("brokerd.lock") && names.contains("state.json"))

        // The disk is back: the same save goes through.
        failing.store(false, ordering: .relaxed)
        try store.save(Self.state(current: nil))
        try store.sync()
        #expect(try store.load()?.current == nil)
        #expect(try FileStateStore.peek(directory.path)?.current == nil)
    }

    @Test func aFailedFlushIsReportedAndTheNextSaveFlushesAgain() throws {
        let directory = Directory()
        let failing = Atomic(false)
        let store = try FileStateStore(
            directory: directory.path,
            system: SystemCalls.system.failing(.fsync, with: EIO) { failing.load(ordering: .relaxed) })
        failing.store(true, ordering: .relaxed)
        try store.save(Self.state(current: Self.alice))
        #expect(throws: StoreError.self) { try store.sync() }
        // The rename happened: a restarted brokerd reads the new state; only its survival of a power loss was in doubt.
        #expect(try FileStateStore.peek(directory.path)?.current == Self.alice)

        failing.store(false, ordering: .relaxed)
        try store.save(Self.state(current: Self.alice, refreshToken: "rt-2"))
        try store.sync()
    }

    /// A start that cannot open the journal again for appending (no descriptor left, say) loses
    /// nothing: the journal is not written to, the first change is a snapshot with a journal of
    /// its own, and a restart reads it.
    @Test func aJournalThatCannotBeReopenedAtStartMakesTheFirstChangeASnapshot() throws {
        let directory = Directory()
        func with(_ clients: [String]) -> BrokerState {
            var state = Self.state(current: Self.alice)
            for client in clients { state.clients[client] = ClientRecord(lastSeen: Self.alice) }
            return state
        }
        do {
            let store = try FileStateStore(directory: directory.path)
            try store.save(with([]))
            try store.save(with(["calendar"]))
            try store.save(with(["calendar", "notes"]))
            try store.sync()
        }
        let journal = try #require(FileManager.default.contents(atPath: directory.journal))
        let snapshot = try directory.stateFileInode()
        let failing = Atomic(false)
        let store = try FileStateStore(
            directory: directory.path,
            system: SystemCalls.system.failing(.open, with: EMFILE) { failing.load(ordering: .relaxed) })
        failing.store(true, ordering: .relaxed)
        #expect(try store.load() == with(["calendar", "notes"]))
        failing.store(false, ordering: .relaxed)
        #expect(FileManager.default.contents(atPath: directory.journal) == journal)

        try store.save(with(["calendar", "notes", "chat"]))
        try store.sync()
        #expect(try directory.stateFileInode() != snapshot, "a snapshot, not a line in a journal that is not open")
        #expect(
            try FileStateStore.peek(directory.path) == StateFileFormat.persisted(with(["calendar", "notes", "chat"])))
        // The journal of the new snapshot takes the next change as a line.
        let newSnapshot = try directory.stateFileInode()
        try store.save(with(["calendar", "notes", "chat", "files"]))
        try store.sync()
        #expect(try directory.stateFileInode() == newSnapshot)
        #expect(
            try FileStateStore.peek(directory.path)
                == StateFileFormat.persisted(with(["calendar", "notes", "chat", "files"])))
    }

    /// A sign-out is a line; the snapshot that takes its refresh token out of the files comes with
    /// the sync. When that snapshot cannot be written, the sign-out stands all the same.
    @Test func aPurgeThatCannotBeWrittenKeepsTheSignOutAndIsTriedAgain() throws {
        let directory = Directory()
        let failing = Atomic(false)
        let store = try FileStateStore(
            directory: directory.path,
            system: SystemCalls.system.failing(.rename, with: EIO) { failing.load(ordering: .relaxed) })
        try store.save(Self.state(current: Self.alice))
        try store.sync()
        try store.save(Self.state(current: Self.alice, refreshToken: "rt-2"))
        try store.sync()
        let signedOut = BrokerState(
            deviceId: "d-1", current: nil, clients: ["mail": ClientRecord(lastSeen: Self.alice)])

        failing.store(true, ordering: .relaxed)
        try store.save(signedOut)
        #expect(throws: StoreError.self) { try store.sync() }
        #expect(try FileStateStore.peek(directory.path) == StateFileFormat.persisted(signedOut), "the line holds it")
        #expect(directory.text().contains("rt-2"))

        failing.store(false, ordering: .relaxed)
        try store.sync()
        #expect(!directory.text().contains("rt-2"), "\(directory.text())")
        #expect(try FileStateStore.peek(directory.path) == StateFileFormat.persisted(signedOut))
    }

    /// Settling revocations: a refresh token the provider revoked grants nothing, so the line that
    /// stops owing it writes no snapshot (state.json keeps its inode) and it stays in the files
    /// until the next one; the next start writes that snapshot. A secret whose revocation was not
    /// made (here a device secret) may still grant access and leaves the files at the sync.
    @Test func aRevokedRefreshTokenWaitsForTheNextSnapshotAndAnUnrevokedSecretDoesNot() throws {
        var owing = BrokerState(deviceId: "d-1", current: nil, clients: ["mail": ClientRecord(lastSeen: Self.alice)])
        owing.owe([
            PendingRevocation(clientId: "mail", token: .refreshToken("rt-revoked")),
            PendingRevocation(clientId: "mail", token: .deviceSecret("ds-unrevoked")),
        ])
        func without(_ state: BrokerState, _ tokens: Set<String>) -> BrokerState {
            var state = state
            state.pendingRevocations.removeAll { tokens.contains($0.token.value) }
            return state
        }
        /// Each state saved (with the tokens the provider revoked) and synced, in turn.
        func write(_ changes: [(BrokerState, Set<String>)], with store: FileStateStore) throws {
            for (state, revoked) in changes {
                try store.save(state, revoked: revoked)
                try store.sync()
            }
        }
        let settled = without(owing, ["rt-revoked"])

        // The settle as the first line after a snapshot (the journal not started yet).
        let directory = Directory()
        do {
            let store = try FileStateStore(directory: directory.path)
            try write([(owing, [])], with: store)
            let inode = try directory.stateFileInode()
            try write([(settled, ["rt-revoked"])], with: store)
            #expect(try directory.stateFileInode() == inode, "a snapshot was written for a revoked token")
            #expect(directory.text().contains("rt-revoked"))
            #expect(try FileStateStore.peek(directory.path) == StateFileFormat.persisted(settled))

            try write([(without(settled, ["ds-unrevoked"]), [])], with: store)
            #expect(try directory.stateFileInode() != inode)
            #expect(!directory.text().contains("ds-unrevoked"), "\(directory.text())")
        }
        // The same line, then a start.
        let restartedDirectory = Directory()
        do {
            let store = try FileStateStore(directory: restartedDirectory.path)
            try write([(owing, []), (settled, ["rt-revoked"])], with: store)
            #expect(restartedDirectory.text().contains("rt-revoked"))
        }
        let restarted = try FileStateStore(directory: restartedDirectory.path)
        #expect(try restarted.load() == settled)
        #expect(!restartedDirectory.text().contains("rt-revoked"), "\(restartedDirectory.text())")

        // On a journal already open (the settle follows the sign-out's line), and then both in
        // one change: the unrevoked one makes the snapshot, which takes the revoked one out too.
        let open = Directory()
        do {
            let store = try FileStateStore(directory: open.path)
            var seen = owing
            seen.clients["notes"] = ClientRecord(lastSeen: Self.alice)
            try write([(owing, []), (seen, [])], with: store)
            let inode = try open.stateFileInode()
            try write([(without(seen, ["rt-revoked"]), ["rt-revoked"])], with: store)
            #expect(try open.stateFileInode() == inode)
            try write([(seen, []), (without(seen, ["rt-revoked", "ds-unrevoked"]), ["rt-revoked"])], with: store)
            #expect(try open.stateFileInode() != inode)
            #expect(!open.text().contains("rt-revoked") && !open.text().contains("ds-unrevoked"), "\(open.text())")
        }
    }

    @Test func aSecondStoreOnTheSameDirectoryIsRefused() throws {
        let directory = Directory()
        let first = try FileStateStore(directory: directory.path)
        #expect(throws: StoreError.self) { _ = try FileStateStore(directory: directory.path) }
        withExtendedLifetime(first) {}
        let locking = SystemCalls.system.failing(.flock, with: EWOULDBLOCK)
        let other = Directory()
        #expect(throws: StoreError.self) { _ = try FileStateStore(directory: other.path, system: locking) }
    }

    @Test func aHardLinkedLockFileIsRefusedAndTheFileItSharesKeepsItsBytes() throws {
        let directory = Directory()
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        chmod(directory.path, 0o700)
        // The pid brokerd writes in its lock would overwrite whatever file the lock's other name is.
        let other = directory.path + "/notes.txt"
        try Data("the user's own notes\n".utf8).write(to: URL(fileURLWithPath: other))
        #expect(link(other, directory.path + "/brokerd.lock") == 0)
        do {
            _ = try FileStateStore(directory: directory.path)
            Issue.record("a hard-linked brokerd.lock was used")
        } catch {
            #expect("\(error)".contains("brokerd.lock is not a regular file of this user's with one name"), "\(error)")
        }
        #expect(try String(contentsOfFile: other, encoding: .utf8) == "the user's own notes\n")
    }

    /// The core over the real store: a change whose write fails is refused with StorageFailed,
    /// and the broker, the file and the announcements stay as they were.
    @Test func theBrokerRefusesAChangeItCannotWrite() async throws {
        let directory = Directory()
        let failing = Atomic(false)
        let store = try FileStateStore(
            directory: directory.path,
            system: SystemCalls.system.failing(.write, with: ENOSPC) { failing.load(ordering: .relaxed) })
        let initial = Self.state(current: Self.alice)
        try store.save(initial)
        try store.sync()
        let announced = Atomic(0)
        let broker = Broker(
            configuration: BrokerConfiguration(deviceMode: .shared, brokerVersion: "test"),
            provider: UnreachableProvider(), store: store, clock: FixedClock(), initialState: initial,
            logger: Logger(label: "test"), announce: { _ in announced.add(1, ordering: .relaxed) })
        let before = directory.bytes()

        failing.store(true, ordering: .relaxed)
        await #expect(throws: BrokerFailure.self) { try await broker.signOut(clientId: "mail", accountId: "") }
        do {
            _ = try await broker.currentAccount(clientId: "calendar")
            Issue.record("recording what calendar saw needs a write, which failed")
        } catch {
            #expect(error.code == .storageFailed)
            #expect(error.message.contains("nothing was changed"))
        }
        #expect(broker.snapshot == initial)
        #expect(directory.bytes() == before)
        #expect(announced.load(ordering: .relaxed) == 0)
    }
}

extension FileStateStore {
    /// The state a new store would load from `directory` (its state file and journal), read
    /// without taking the directory's lock.
    static func peek(_ directory: String) throws -> BrokerState? {
        guard let bytes = FileManager.default.contents(atPath: directory + "/state.json") else { return nil }
        var loaded = try StateFileFormat.decode(Array(bytes))
        if let snapshot = loaded.journal,
            let journal = FileManager.default.contents(atPath: directory + "/state.journal")
        {
            _ = try StateJournal.replay(
                Array(journal), snapshot: snapshot, onto: &loaded.state, table: &loaded.accounts)
        }
        return loaded.state
    }
}
