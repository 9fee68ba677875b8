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
        /// A reply was claimed (the only one this call gets).
        var answered = false
        /// That reply is queued on the connection.
        var delivered = false
        var whenAnswered: [@Sendable () -> Void] = []
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

    /// Runs `body` once the reply is handed to the connection, which sends it before anything
    /// enqueued later (at once when it was already): what counts a call as done for someone
    /// who must not let the process end before its callers have their replies.
    public func whenAnswered(_ body: @escaping @Sendable () -> Void) {
        let now: Bool = state.withLock { state in
            if state.delivered { return true }
            state.whenAnswered.append(body)
            return false
        }
        if now { body() }
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
        guard first else { return }
        send(result)
        let waiting: [@Sendable () -> Void] = state.withLock { state in
            state.delivered = true
            defer { state.whenAnswered = [] }
            return state.whenAnswered
        }
        for body in waiting { body() }
    }
}
