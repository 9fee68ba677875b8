import CTaskPool
import Glibc
import Locking
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

/// brokerd's executors for Swift concurrency: a few worker threads that sleep on a condition
/// variable until there is a job, one thread that sleeps on a boot-time timer until a delayed
/// job is due, and the main actor on the main thread, in place of libdispatch's.
///
/// Why: on Linux, Swift's default executor is libdispatch's internal workqueue, whose pool
/// monitor is a timer that wakes the process every second for as long as it lives
/// (`_dispatch_workq_monitor_pools`). A broker on a battery-powered shift tablet must not wake the
/// CPU while nothing happens. So brokerd installs its own executors before its first task
/// (`_createExecutors`, the runtime's entry point for custom default executors, which is what
/// `Task.sleep` also asks: through the runtime's enqueue hooks alone, a sleep would still start
/// libdispatch). With nothing to run and no timer armed, every thread of brokerd's waits without
/// a timeout.
///
/// Delayed jobs (a `Task.sleep`: a token's expiry, an inactivity deadline, a configured poll) wait
/// on `CLOCK_BOOTTIME`, the clock `ContinuousClock` reads, so that a deadline passed during a
/// suspend is met at resume (a monotonic wait would add the suspend to it). A deadline of
/// `SuspendingClock` is converted when it is set, so a suspend shortens it instead: brokerd sleeps
/// on `ContinuousClock` only.
///
/// Jobs run first in, first out, without priorities: brokerd's tasks are short and do not wait on
/// each other (the bus and HTTP have threads of their own).
public enum TaskPool {
    /// Installs the executors for the rest of the process, with `threads` workers; then runs
    /// `body` as the main task and exits with its status. Call it first thing in a synchronous
    /// `main`, before any task exists.
    public static func runMain(threads: Int, _ body: @escaping @Sendable () async -> Int32) -> Never {
        pool.start(threads: threads)
        _createExecutors(factory: Executors.self)
        Task { mainQueue.finish(status: await body()) }
        exit(mainQueue.drainOnThisThread())
    }

    /// How many workers: the processors this process may use, as Swift's cooperative pool sizes
    /// itself, and at least four. libdispatch adds a thread when its workers are all blocked (its
    /// monitor, the timer this pool does without, looks every second); this pool does not, so it
    /// keeps room for a worker or two held up in a system call (an fsync on a busy disk) while the
    /// others go on. An idle worker costs a few pages of stack and no wake-up.
    public static var defaultWidth: Int { max(4, Int(ctp_available_processors())) }

    /// Why tasks do not run on this pool, or nil when they do; call it from a task. Both ways
    /// the runtime reaches an executor are checked: the task's own job runs on a thread of the
    /// pool's (or the main thread it drains), and a `Task.sleep` becomes a delayed job of the
    /// pool's and resumes on one of its threads. `_createExecutors` is experimental runtime SPI:
    /// a toolchain whose runtime no longer asks the factory would run every task on libdispatch
    /// again, silently, and its pool monitor would wake the process every second.
    public static func checkInstalled() async -> String? {
        let why =
            "Swift's runtime does not run brokerd's tasks on TaskPool (the executor factory given to "
            + "_createExecutors was not asked): an idle brokerd will wake every second. This toolchain "
            + "needs TaskPool adapted (docs/architecture.md, \"A toolchain upgrade\")"
        guard ctp_thread_is_marked() != 0 else { return why + "; a task ran on another thread" }
        let before = pool.delayedJobs
        try? await Task.sleep(for: .microseconds(1))
        guard pool.delayedJobs > before else { return why + "; a Task.sleep did not reach its timer" }
        guard ctp_thread_is_marked() != 0 else { return why + "; a task resumed on another thread" }
        return nil
    }
}

/// What the runtime asks for the default executor and the main executor.
struct Executors: ExecutorFactory {
    static var mainExecutor: any MainExecutor { mainQueue }
    static var defaultExecutor: any TaskExecutor { pool }
}

private let pool = WorkerPool()
private let mainQueue = MainQueue()

/// A mutex and a condition variable.
final class Condition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    func signal() { pthread_cond_signal(condition) }
    /// Waits, the mutex held, until signalled.
    func wait() { pthread_cond_wait(condition, mutex) }
}

/// A first-in, first-out queue of jobs that grows as needed and reuses its storage.
struct JobQueue {
    private var items: [UnownedJob] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }

    mutating func append(_ job: UnownedJob) { items.append(job) }

    mutating func popFirst() -> UnownedJob? {
        guard head < items.count else { return nil }
        let job = items[head]
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1024, head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return job
    }
}

/// Jobs due at a time (boot-time nanoseconds), the earliest first; equal deadlines in the order
/// they came.
struct TimerHeap {
    private struct Entry {
        var deadline: UInt64
        var order: UInt64
        var job: UnownedJob
        func before(_ other: Entry) -> Bool { (deadline, order) < (other.deadline, other.order) }
    }
    private var entries: [Entry] = []
    private var counter: UInt64 = 0

    var earliest: UInt64? { entries.first?.deadline }

    mutating func insert(_ job: UnownedJob, at deadline: UInt64) {
        counter &+= 1
        entries.append(Entry(deadline: deadline, order: counter, job: job))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].before(entries[parent]) else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// The earliest job, if it is due at `now`.
    mutating func popDue(at now: UInt64) -> UnownedJob? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < entries.count, entries[left].before(entries[smallest]) { smallest = left }
                if right < entries.count, entries[right].before(entries[smallest]) { smallest = right }
                if smallest == parent { break }
                entries.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first.job
    }
}

/// The default executor: its workers run jobs as they come; its timer thread moves delayed jobs
/// to them when due.
final class WorkerPool: TaskExecutor, SchedulingExecutor, @unchecked Sendable {
    private let condition = Condition()
    private let timer = ctp_timer_create()
    // Guarded by `condition`'s mutex.
    private var ready = JobQueue()
    private var timers = TimerHeap()
    private var idle = 0
    /// The deadline the timer is armed for, if any.
    private var armed: UInt64?
    /// How many delayed jobs were enqueued (``TaskPool/checkInstalled()``).
    private var delayedCount: UInt64 = 0

    var delayedJobs: UInt64 {
        condition.lock()
        defer { condition.unlock() }
        return delayedCount
    }

    func start(threads: Int) {
        guard timer >= 0 else { Self.fail("cannot create its timer (timerfd_create, errno \(errno))") }
        for _ in 0..<threads {
            spawn { [self] in
                ctp_mark_thread("taskpool")
                work()
            }
        }
        spawn { [self] in
            ctp_mark_thread("taskpool-timer")
            waitForTimers()
        }
    }

    /// Without its threads or its timer no task would run or wake: brokerd stops at once, saying why.
    private static func fail(_ why: String) -> Never {
        let message = Array("brokerd: the task pool \(why)\n".utf8)
        _ = message.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        exit(1)
    }

    private func spawn(_ body: @escaping @Sendable () -> Void) {
        let created = startDetachedThread(body)
        guard created == 0 else { Self.fail("cannot start a thread (pthread_create: \(created))") }
    }

    func enqueue(_ job: consuming ExecutorJob) { enqueue(UnownedJob(job)) }

    func enqueue(_ job: UnownedJob) {
        condition.lock()
        ready.append(job)
        if idle > 0 { condition.signal() }
        condition.unlock()
    }

    func enqueue<C: Clock>(_ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C) {
        let left = (clock.now.duration(to: instant) as? Duration).map(Self.nanoseconds) ?? 0
        enqueue(UnownedJob(job), at: ctp_boottime_ns() &+ UInt64(clamping: max(0, left)))
    }

    /// `duration` in nanoseconds, saturated (a sleep of centuries is one that never ends).
    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        guard seconds < 9_000_000_000 else { return Int64.max }
        guard seconds > -9_000_000_000 else { return 0 }
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    func enqueue(_ job: UnownedJob, at deadline: UInt64) {
        condition.lock()
        delayedCount &+= 1
        timers.insert(job, at: deadline)
        if armed.map({ deadline < $0 }) ?? true {
            armed = deadline
            // The timer thread's read ends at the new time; nobody else is woken.
            _ = ctp_timer_arm(timer, max(1, deadline))
        }
        condition.unlock()
    }

    /// The timer thread: sleeps until the earliest deadline, hands what is due to the workers,
    /// and arms the timer for the next one (or none).
    private func waitForTimers() {
        while true {
            if ctp_timer_wait(timer) != 0 {
                guard errno == EINTR || errno == EAGAIN else {
                    Self.fail("cannot read its timer (errno \(errno))")
                }
                continue
            }
            condition.lock()
            let now = ctp_boottime_ns()
            var due = 0
            while let job = timers.popDue(at: now) {
                ready.append(job)
                due += 1
            }
            for _ in 0..<min(due, idle) { condition.signal() }
            armed = timers.earliest
            _ = ctp_timer_arm(timer, armed.map { max(1, $0) } ?? 0)
            condition.unlock()
        }
    }

    private func work() {
        // Jobs run as libdispatch's workers run them: on the runtime's generic executor, with no
        // task executor preference. Run "on" this pool as a task executor instead, a hop to an
        // actor could never take the thread it is on (the runtime switches inline only from the
        // generic executor): each hop would be queued and wake another worker, and each return
        // from the actor again, two thread wake-ups in every call brokerd answers.
        let executor = runtimeGenericExecutor()
        condition.lock()
        while true {
            if let job = ready.popFirst() {
                // Another job waits: a sleeping worker takes it while this one runs.
                if !ready.isEmpty, idle > 0 { condition.signal() }
                condition.unlock()
                job.runSynchronously(on: executor)
                condition.lock()
                continue
            }
            idle += 1
            condition.wait()
            idle -= 1
        }
    }
}

/// The runtime's generic executor (`SerialExecutorRef::generic()`: no actor, no task executor),
/// the one libdispatch's global executor runs its jobs on. The runtime represents it as a null
/// identity and a zero implementation word; no public API names it.
private func runtimeGenericExecutor() -> UnownedSerialExecutor {
    guard MemoryLayout<UnownedSerialExecutor>.size == 2 * MemoryLayout<UInt>.size else {
        fatalError("UnownedSerialExecutor is no longer two words: TaskPool needs the runtime's generic executor")
    }
    return unsafeBitCast((UInt(0), UInt(0)), to: UnownedSerialExecutor.self)
}

/// The main executor: the main actor's jobs, run on the process's main thread.
final class MainQueue: MainExecutor, @unchecked Sendable {
    private let condition = Condition()
    private var jobs = JobQueue()
    private var status: Int32?
    private var stopped = false

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    func finish(status: Int32) {
        condition.lock()
        self.status = status
        condition.signal()
        condition.unlock()
    }

    func run() throws { _ = drainOnThisThread() }

    func stop() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    /// Runs main-actor jobs on the calling (main) thread until the main task finishes (or a
    /// stop); returns its status.
    func drainOnThisThread() -> Int32 {
        // Main-actor jobs run here: this thread is the pool's too (not renamed: it is the process).
        ctp_mark_thread(nil)
        condition.lock()
        while true {
            if let job = jobs.popFirst() {
                condition.unlock()
                job.runSynchronously(on: asUnownedSerialExecutor())
                condition.lock()
                continue
            }
            if let status {
                condition.unlock()
                return status
            }
            if stopped {
                condition.unlock()
                return 0
            }
            condition.wait()
        }
    }
}
