import Locking

/// A method call in progress in its handler's task: whoever holds it can cancel the task, or
/// answer the caller at once with an error when the handler will not return in time (a stop).
/// The handler's own result, if it comes later, is then dropped: a call gets one reply.
///
/// The connection makes one for every call it hands to ``DBusObject/handleMethodCall(_:)`` and
/// sets it as ``current`` for that task, so a wrapper object can keep track of the calls in
/// flight without a task of its own per call.
public final class DBusCallControl: Sendable {
    /// The call whose handler runs in the current task, if any.
    @TaskLocal public static var current: DBusCallControl?

    private struct State {
        var task: Task<Void, Never>?
        var cancelled = false
        var answered = false
    }

    private let state = Locked(State())
    private let send: @Sendable (Result<[DBusValue], DBusError>) -> Void

    init(send: @escaping @Sendable (Result<[DBusValue], DBusError>) -> Void) {
        self.send = send
    }

    /// Cancels the handler's task (at once, or as soon as it exists).
    public func cancel() {
        let task: Task<Void, Never>? = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }

    /// Replies with `error` now, unless the call was answered already; the handler's result is
    /// dropped when it comes.
    public func answer(_ error: DBusError) {
        finish(.failure(error))
    }

    /// The task the handler runs in; cancelled at once when ``cancel()`` came first.
    func attach(_ task: Task<Void, Never>) {
        let cancelled: Bool = state.withLock { state in
            state.task = task
            return state.cancelled
        }
        if cancelled { task.cancel() }
    }

    /// Sends the reply, unless one went already.
    func finish(_ result: Result<[DBusValue], DBusError>) {
        let first: Bool = state.withLock { state in
            defer { state.answered = true }
            return !state.answered
        }
        if first { send(result) }
    }
}
