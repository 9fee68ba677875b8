import SharedDeviceClient

/// Collects what an `accountChanges` sequence yields, so a test can wait (bounded, without
/// sleeping) for a change that matches.
actor ChangeRecorder {
    private(set) var changes: [AccountChange] = []
    private(set) var ended = false
    private var waiters:
        [(
            id: Int, matches: @Sendable (AccountChange) -> Bool,
            continuation: CheckedContinuation<AccountChange?, Never>
        )] = []
    private var nextId = 0

    /// Records every change of `sequence` until it ends; returns the consuming task.
    nonisolated func record(_ sequence: AsyncThrowingStream<AccountChange, any Error>) -> Task<Void, Never> {
        Task {
            do {
                for try await change in sequence { await self.append(change) }
            } catch {}
            await self.end()
        }
    }

    private func append(_ change: AccountChange) {
        changes.append(change)
        let ready = waiters.filter { $0.matches(change) }
        waiters.removeAll { waiter in ready.contains { $0.id == waiter.id } }
        for waiter in ready { waiter.continuation.resume(returning: change) }
    }

    private func end() {
        ended = true
        for waiter in waiters { waiter.continuation.resume(returning: nil) }
        waiters.removeAll()
    }

    /// The first change (from index `from` on) that matches, or nil when `timeout` passes or the sequence ends first.
    func next(
        from start: Int = 0, timeout: Duration = .seconds(10),
        where matches: @escaping @Sendable (AccountChange) -> Bool
    ) async -> AccountChange? {
        if let found = changes.dropFirst(start).first(where: matches) { return found }
        if ended { return nil }
        let id = nextId
        nextId += 1
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.expire(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            waiters.append((id, matches, continuation))
        }
    }

    private func expire(_ id: Int) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        waiters.remove(at: index).continuation.resume(returning: nil)
    }

    /// Waits (bounded) until the sequence has ended; true when it did.
    func waitUntilEnded(timeout: Duration = .seconds(10)) async -> Bool {
        if ended { return true }
        _ = await next(from: changes.count, timeout: timeout) { _ in false }
        return ended
    }
}
