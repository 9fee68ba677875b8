/// What `body` gives within `timeout`, or nil when it gives nothing by then: a bound on a wait for
/// something that comes (a signal, a stream's element), not a synchronization.
package func within<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async -> T?) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}
