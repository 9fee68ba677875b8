import CCurl
import Locking

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A request waiting for, or owned by, the worker thread.
struct Job: Sendable {
    let id: UInt64
    let request: HTTPRequest
    let continuation: CheckedContinuation<Result<HTTPResponse, HTTPError>, Never>
}

/// A libcurl multi handle. `@unchecked Sendable` because only the thread-safe
/// `curl_multi_wakeup` is ever called on it off the worker thread, and only under the lock.
struct MultiHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer

    func wakeup() {
        _ = ccurl_multi_wakeup(pointer)
    }
}

/// What callers and the worker thread share, behind one lock.
struct SharedState: Sendable {
    /// The multi handle; nil before the first request, when libcurl could not be set up, or once
    /// the worker has stopped. Callers only use it for `curl_multi_wakeup`, under the lock.
    var multi: MultiHandle?
    /// Whether the first request has set up libcurl and the thread (successfully or not).
    var started = false
    /// Why libcurl or the thread could not be set up, once `started`.
    var startFailure: String?
    /// Requests not yet picked up by the worker.
    var queue: [Job] = []
    /// Ids the worker owns (picked up, not yet finished).
    var owned: Set<UInt64> = []
    /// Ids whose cancellation the worker has yet to act on.
    var cancellations: [UInt64] = []
    /// Ids cancelled before they were enqueued; removed by `forget`.
    var cancelledEarly: Set<UInt64> = []
    var nextID: UInt64 = 1
    var stopping = false
    /// Worker threads that have not returned: the one serving requests, and any that let
    /// libcurl go after being idle and are still freeing it (a stop waits for those too: exit
    /// would tear libcurl down under them).
    var threads = 0
    /// Who waits for the thread's end (``CurlWorker/stopAndWait()``).
    var endWaiters: [CheckedContinuation<Void, Never>] = []
}

/// The shared half of the worker: the lock-protected queue and the wake-up.
/// The thread-confined half is ``CurlLoop``.
///
/// Nothing happens until the first request: only then is libcurl loaded and the worker thread
/// started, so a client that is created but never used (an idle broker) costs neither. After
/// `idleRelease` without a transfer the thread ends and lets libcurl go; the next request starts
/// both again.
final class CurlWorker: Sendable {
    let state: Locked<SharedState>
    let userAgent: String
    let idleRelease: Duration

    init(userAgent: String, idleRelease: Duration) {
        self.userAgent = userAgent
        self.idleRelease = idleRelease
        self.state = Locked(SharedState())
    }

    /// Loads libcurl, creates the multi handle and starts the thread; under the lock.
    /// The thread's first step waits for the lock, so it starts after this request is queued.
    private func start(_ state: inout SharedState) {
        state.started = true
        if let failure = ccurl_load() {
            state.startFailure = String(cString: failure)
            return
        }
        guard let pointer = ccurl_multi_init() else {
            state.startFailure = "libcurl could not create a multi handle"
            ccurl_unload()
            return
        }
        let multi = MultiHandle(pointer: pointer)
        state.multi = multi
        state.threads += 1
        let failure = startDetachedThread { [self] in
            _ = CurlLoop(worker: self)?.run()
            ccurl_unload()
            let waiters = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.threads -= 1
                guard state.threads == 0 else { return [] }
                defer { state.endWaiters = [] }
                return state.endWaiters
            }
            for waiter in waiters { waiter.resume() }
        }
        if failure != 0 {
            state.threads -= 1
            state.multi = nil
            state.startFailure = "cannot start the HTTP worker thread"
            _ = ccurl_multi_cleanup(multi.pointer)
            ccurl_unload()
        }
    }

    /// Whether a worker thread holds libcurl now (for tests of the idle release).
    var running: Bool { state.withLock { $0.started && $0.multi != nil } }

    func makeID() -> UInt64 {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            return id
        }
    }

    func forget(_ id: UInt64) {
        state.withLock { _ = $0.cancelledEarly.remove(id) }
    }

    func enqueue(_ job: Job) {
        let failure: HTTPError? = state.withLock { state in
            if state.cancelledEarly.remove(job.id) != nil { return .cancelled }
            if state.stopping {
                return .transport(code: Int(CURLE_FAILED_INIT.rawValue), message: "the HTTP client was shut down")
            }
            if !state.started { start(&state) }
            guard let multi = state.multi else {
                let failure = HTTPError.transport(
                    code: Int(CURLE_FAILED_INIT.rawValue),
                    message: state.startFailure ?? "the HTTP worker has stopped")
                if state.startFailure != nil {
                    // Tried again by the next request: libcurl may be back (a package upgrade
                    // between two requests), or a thread may be had again.
                    state.started = false
                    state.startFailure = nil
                }
                return failure
            }
            state.queue.append(job)
            multi.wakeup()
            return nil
        }
        if let failure { job.continuation.resume(returning: .failure(failure)) }
    }

    func cancel(_ id: UInt64) {
        let queued: Job? = state.withLock { state in
            if let index = state.queue.firstIndex(where: { $0.id == id }) {
                return state.queue.remove(at: index)
            }
            if state.owned.contains(id) {
                state.cancellations.append(id)
                state.multi?.wakeup()
            } else {
                state.cancelledEarly.insert(id)
            }
            return nil
        }
        queued?.continuation.resume(returning: .failure(.cancelled))
    }

    func shutdown() {
        state.withLock { state in
            state.stopping = true
            state.multi?.wakeup()
        }
    }

    /// Stops the worker (every transfer ends as cancelled, later requests fail at once) and
    /// returns once its thread has torn libcurl's handles down.
    func stopAndWait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ended = state.withLock { state -> Bool in
                state.stopping = true
                guard state.threads > 0 else { return true }
                state.endWaiters.append(continuation)
                state.multi?.wakeup()
                return false
            }
            if ended { continuation.resume() }
        }
    }
}

/// The worker thread's side: the multi handle, the running transfers and the handle pool.
/// Used only on the worker thread.
final class CurlLoop {
    private let worker: CurlWorker
    private let multi: UnsafeMutableRawPointer
    private var active: [UnsafeMutableRawPointer: Transfer] = [:]
    private var byID: [UInt64: UnsafeMutableRawPointer] = [:]
    private var pool: [UnsafeMutableRawPointer] = []
    private let poolLimit = 8

    init?(worker: CurlWorker) {
        guard let multi = worker.state.withLock({ $0.multi }) else { return nil }
        self.worker = worker
        self.multi = multi.pointer
    }

    /// Drives the transfers until a stop or an idle release; true for the release.
    func run() -> Bool {
        while true {
            let (jobs, cancellations, stopping) = worker.state.withLock { state in
                let jobs = state.queue
                state.queue.removeAll()
                for job in jobs { state.owned.insert(job.id) }
                let cancellations = state.cancellations
                state.cancellations.removeAll()
                return (jobs, cancellations, state.stopping)
            }
            if stopping {
                for job in jobs { job.continuation.resume(returning: .failure(.cancelled)) }
                break
            }
            for job in jobs { start(job) }
            for id in cancellations {
                if let easy = byID[id], let transfer = active[easy] {
                    finish(transfer, with: .failure(.cancelled))
                }
            }
            var running: Int32 = 0
            _ = ccurl_multi_perform(multi, &running)
            var queued: Int32 = 0
            while let message = ccurl_multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = ccurl_msg_easy_handle(message) else { continue }
                let code = ccurl_msg_result(message)
                if let transfer = active[easy] {
                    finish(transfer, with: transfer.outcome(code))
                }
            }
            // libcurl shortens the wait to its own next timer; new work and cancellations
            // interrupt it through curl_multi_wakeup. Idle, the thread sleeps until it is time to
            // let libcurl go, then ends: nothing is polled (a daemon on a tablet must not wake
            // for nothing).
            var timeout: Int32 = 1000
            if active.isEmpty {
                let now = Self.monotonicNanoseconds()
                let since = idleSince ?? now
                idleSince = since
                let left = releaseAfter - Int64(clamping: now &- since)
                if left <= 0 {
                    if releaseIfStillIdle() {
                        released = true
                        break
                    }
                    continue
                }
                timeout = Int32(clamping: (left + 999_999) / 1_000_000)
            } else {
                idleSince = nil
            }
            _ = ccurl_multi_poll(multi, nil, 0, timeout, nil)
        }
        teardown(released: released)
        return released
    }

    /// When the client has been idle since `idleSince`, in monotonic nanoseconds.
    private var idleSince: UInt64?
    private var released = false
    private var releaseAfter: Int64 {
        let (seconds, attoseconds) = worker.idleRelease.components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    /// Hands the client back to its idle state (the next request starts a new worker) unless
    /// work came in meanwhile; true when it did.
    private func releaseIfStillIdle() -> Bool {
        worker.state.withLock { state in
            guard state.queue.isEmpty, state.cancellations.isEmpty, !state.stopping else { return false }
            state.multi = nil
            state.started = false
            return true
        }
    }

    private static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }

    private func start(_ job: Job) {
        guard let easy = pool.popLast() ?? ccurl_easy_init() else {
            done(job.id)
            job.continuation.resume(
                returning: .failure(
                    .transport(code: Int(CURLE_OUT_OF_MEMORY.rawValue), message: "libcurl could not create a handle")))
            return
        }
        let transfer = Transfer(job: job, easy: easy, userAgent: worker.userAgent)
        if let problem = transfer.configure() {
            release(transfer)
            done(job.id)
            job.continuation.resume(returning: .failure(problem))
            return
        }
        guard ccurl_multi_add_handle(multi, easy) == CURLM_OK else {
            release(transfer)
            done(job.id)
            job.continuation.resume(
                returning: .failure(
                    .transport(
                        code: Int(CURLE_FAILED_INIT.rawValue),
                        message: "\(transfer.label): libcurl refused the transfer")))
            return
        }
        active[easy] = transfer
        byID[job.id] = easy
    }

    /// Ends a running transfer: detaches it, recycles its handle, resumes its caller.
    private func finish(_ transfer: Transfer, with result: Result<HTTPResponse, HTTPError>) {
        active[transfer.easy] = nil
        byID[transfer.id] = nil
        _ = ccurl_multi_remove_handle(multi, transfer.easy)
        release(transfer)
        done(transfer.id)
        transfer.continuation.resume(returning: result)
    }

    /// Resets the easy handle into the pool (or frees it) and frees the transfer's C memory.
    private func release(_ transfer: Transfer) {
        ccurl_easy_reset(transfer.easy)
        if pool.count < poolLimit {
            pool.append(transfer.easy)
        } else {
            ccurl_easy_cleanup(transfer.easy)
        }
        transfer.freeResources()
    }

    private func done(_ id: UInt64) {
        worker.state.withLock { _ = $0.owned.remove(id) }
    }

    /// Frees the handles. After a stop, the requests still queued end as cancelled; after an
    /// idle release the shared state is a later worker's already, and is not touched.
    private func teardown(released: Bool) {
        let leftovers: [Job] =
            released
            ? []
            : worker.state.withLock { state in
                state.multi = nil
                let jobs = state.queue
                state.queue.removeAll()
                return jobs
            }
        for transfer in Array(active.values) {
            finish(transfer, with: .failure(.cancelled))
        }
        for job in leftovers { job.continuation.resume(returning: .failure(.cancelled)) }
        for easy in pool { ccurl_easy_cleanup(easy) }
        pool.removeAll()
        _ = ccurl_multi_cleanup(multi)
    }
}
