import BrokerAPI
import Locking
import Testing

@testable import BrokerCore

/// A cleaner the test holds: each clean-up waits until the test lets it finish, and says when it
/// started, so that a test can stop "brokerd" in the middle of it.
final class HeldCleaner: DeviceCleaner, @unchecked Sendable {
    private let events = Locked<[String]>([])
    private let gates = Locked<[CheckedContinuation<Void, Never>]>([])
    private let started: AsyncStream<Void>
    private let startedContinuation: AsyncStream<Void>.Continuation
    let holds: Bool

    init(holds: Bool) {
        self.holds = holds
        (started, startedContinuation) = AsyncStream.makeStream()
    }

    var listsAnything: Bool { true }
    var log: [String] { events.withLock { $0 } }

    func clean() async -> CleanUpReport {
        events.withLock { $0.append("clean started") }
        startedContinuation.yield()
        if holds { await withCheckedContinuation { continuation in gates.withLock { $0.append(continuation) } } }
        events.withLock { $0.append("clean done") }
        var report = CleanUpReport()
        report.noteRemoved("/home/kiosk/Downloads/report.pdf")
        return report
    }

    func waitUntilStarted() async { for await _ in started { return } }

    /// Lets every held clean-up finish, once one has reached its hold (after ``waitUntilStarted()``
    /// it is a few steps away).
    func release() async {
        for _ in 0..<100_000 {
            let waiting = gates.withLock { gates in
                defer { gates.removeAll() }
                return gates
            }
            for gate in waiting { gate.resume() }
            if !waiting.isEmpty { return }
            await Task.yield()
        }
    }
}

@Suite("The clean-up a sign-out owes")
struct CleanUpOwedTests {
    @Test("owed with the sign-out's write, before AccountChanged; a broker stopped during it does it at start")
    func owedWithTheSignOut() async throws {
        let cleaner = HeldCleaner(holds: true)
        let first = Harness(cleaner: cleaner)
        _ = try await first.signIn()
        #expect(first.store.saved?.cleanUpOwed == false)
        let signOut = Task { try await first.broker.signOut(clientId: "mail", accountId: "") }
        await cleaner.waitUntilStarted()
        // The sign-out is written and announced, the clean-up still owed: "brokerd" stops here.
        let atStop = try #require(first.store.saved)
        #expect(atStop.current == nil && atStop.cleanUpOwed)
        #expect(first.changes.changes.last?.reason == .signedOut)

        let again = HeldCleaner(holds: false)
        let restarted = Harness(state: atStop, cleaner: again)
        let report = await restarted.broker.cleanUpOwed()
        #expect(report?.removedCount == 1)
        #expect(again.log == ["clean started", "clean done"])
        #expect(restarted.store.saved?.cleanUpOwed == false, "done, and no longer owed")
        #expect(await restarted.broker.cleanUpOwed() == nil, "nothing owed twice")

        await cleaner.release()
        let outcome = try await signOut.value
        #expect(outcome.cleanedUpCount == 1 && outcome.cleanedUp == ["/home/kiosk/Downloads/report.pdf"])
        #expect(first.store.saved?.cleanUpOwed == false)
    }

    @Test("a sign-in during the clean-up is adopted only once it is over")
    func signInWaitsForTheCleanUp() async throws {
        let cleaner = HeldCleaner(holds: true)
        let harness = Harness(cleaner: cleaner)
        _ = try await harness.signIn()
        let signOut = Task { try await harness.broker.signOut(clientId: "mail", accountId: "") }
        await cleaner.waitUntilStarted()
        let signIn = Task { try await harness.signIn("bob@contoso.example", client: "notes") }
        // Bob's sign-in reaches the provider and comes back; it must not be adopted meanwhile.
        for _ in 0..<200 { await Task.yield() }
        #expect(harness.broker.deviceAccount == nil, "bob was signed in during the last clean-up")
        await cleaner.release()
        _ = try await signIn.value
        _ = try await signOut.value
        #expect(harness.broker.deviceAccount?.username == "bob@contoso.example")
    }

    @Test("no clean-up listed: nothing is owed, the state file is as before")
    func nothingListedNothingOwed() async throws {
        let harness = Harness()
        _ = try await harness.signIn()
        try await harness.broker.signOut(clientId: "mail", accountId: "")
        #expect(harness.store.saved?.cleanUpOwed == false)
    }
}
