import CConcurrencyHooks
import Glibc

/// brokerd's executor for Swift concurrency: a few threads that sleep on a condition variable
/// until there is a job, and a main thread of its own, in place of libdispatch's.
///
/// Why: on Linux, Swift's default global executor is libdispatch's internal workqueue, whose
/// pool monitor is a timer that wakes the process every second for as long as it lives
/// (`_dispatch_workq_monitor_pools`). A broker on a battery-powered shift tablet must not wake the
/// CPU while nothing happens, so brokerd takes over the runtime's enqueue hooks (the same hooks
/// SwiftNIO uses to run tasks on its event loops) before its first task: with nothing to run
/// and no timer armed, every thread of this pool waits without a timeout. A delayed job (a
/// `Task.sleep`: a token's expiry, an inactivity deadline, a configured poll) arms the one wait
/// that ends at the earliest deadline.
///
/// Jobs run first in, first out, without priorities: brokerd's tasks are short and do not wait on
/// each other (the bus and HTTP have threads of their own).
public enum TaskPool {
    /// Takes over the global executor (and the main executor) for the rest of the process, with
    /// `threads` workers; then runs `body` as the main task and exits with its status. Call it
    /// first thing in a synchronous `main`, before any task exists.
    public static func runMain(threads: Int, _ body: @escaping @Sendable () async -> Int32) -> Never {
        install(threads: threads)
        Task { mainQueue.finish(status: await body()) }
        exit(mainQueue.drainOnThisThread())
    }

    /// How many workers: the processors this process may use, as Swift's cooperative pool sizes
    /// itself, and at least four. libdispatch adds a thread when its workers are all blocked (its
    /// monitor, the timer this pool does without, looks every second); this pool does not, so it
    /// keeps room for a worker or two held up in a system call (an fsync on a busy disk) while the
    /// others go on. An idle worker costs a few pages of stack and no wake-up.
    public static var defaultWidth: Int { max(4, Int(cch_available_processors())) }

    private static func install(threads: Int) {
        typealias Original = UnsafeMutableRawPointer?
        let global: @convention(thin) (UnownedJob, Original) -> Void = { job, _ in pool.enqueue(job) }
        let delayed: @convention(thin) (UInt64, UnownedJob, Original) -> Void = { nanoseconds, job, _ in
            pool.enqueue(job, at: Monotonic.now() &+ nanoseconds)
        }
        let deadline: @convention(thin) (Int64, Int64, Int64, Int64, Int32, UnownedJob, Original) -> Void = {
            seconds, nanoseconds, _, _, clock, job, _ in
            // The deadline is on the task's clock (continuous or suspending); the pool waits on
            // the monotonic clock, for what is left of it.
            var nowSeconds: Int64 = 0
            var nowNanoseconds: Int64 = 0
            swiftGetTime(&nowSeconds, &nowNanoseconds, clock)
            let left = (seconds &- nowSeconds) &* 1_000_000_000 &+ (nanoseconds &- nowNanoseconds)
            pool.enqueue(job, at: Monotonic.now() &+ UInt64(clamping: max(0, left)))
        }
        let main: @convention(thin) (UnownedJob, Original) -> Void = { job, _ in mainQueue.enqueue(job) }
        pool.start(threads: threads)
        cch_install(
            unsafeBitCast(global, to: UnsafeMutableRawPointer.self),
            unsafeBitCast(delayed, to: UnsafeMutableRawPointer.self),
            unsafeBitCast(deadline, to: UnsafeMutableRawPointer.self),
            unsafeBitCast(main, to: UnsafeMutableRawPointer.self))
    }
}

/// The runtime's reading of a Swift clock (`swift_clock_id`: continuous or suspending).
@_silgen_name("swift_get_time")
private func swiftGetTime(
    _ seconds: UnsafeMutablePointer<Int64>, _ nanoseconds: UnsafeMutablePointer<Int64>, _ clock: Int32)

private let pool = WorkerPool()
private let mainQueue = MainQueue()

enum Monotonic {
    /// CLOCK_MONOTONIC in nanoseconds: what the pool's timed wait is measured against.
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}

/// A mutex and a condition variable whose timed wait is on the monotonic clock.
final class Condition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    func signal() { pthread_cond_signal(condition) }

    /// Waits (the mutex held) until signalled or, with a deadline, until then.
    func wait(until deadline: UInt64?) {
        guard let deadline else {
            pthread_cond_wait(condition, mutex)
            return
        }
        var time = timespec(
            tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_cond_timedwait(condition, mutex, &time)
    }
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

/// Jobs due at a time (monotonic nanoseconds), the earliest first; equal deadlines in the order
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

/// The global executor's workers.
final class WorkerPool: TaskExecutor, @unchecked Sendable {
    private let condition = Condition()
    // Guarded by `condition`'s mutex.
    private var ready = JobQueue()
    private var timers = TimerHeap()
    private var idle = 0
    /// The deadline a worker waits for; the others wait without one. An earlier timer makes the
    /// next worker that looks wait for it instead.
    private var watchedDeadline: UInt64?

    func start(threads: Int) {
        for _ in 0..<threads {
            var thread = pthread_t()
            let context = Unmanaged.passRetained(self).toOpaque()
            let created = pthread_create(
                &thread, nil,
                { context in
                    guard let context else { return nil }
                    Unmanaged<WorkerPool>.fromOpaque(context).takeRetainedValue().work()
                    return nil
                }, context)
            if created == 0 {
                pthread_detach(thread)
            } else {
                Unmanaged<WorkerPool>.fromOpaque(context).release()
            }
        }
    }

    func enqueue(_ job: UnownedJob) {
        condition.lock()
        ready.append(job)
        if idle > 0 { condition.signal() }
        condition.unlock()
    }

    func enqueue(_ job: consuming ExecutorJob) { enqueue(UnownedJob(job)) }

    func enqueue(_ job: UnownedJob, at deadline: UInt64) {
        condition.lock()
        let earlier = timers.earliest.map { deadline < $0 } ?? true
        timers.insert(job, at: deadline)
        // The worker watching the timers waits for a later deadline, or none does: wake one.
        if earlier, idle > 0 { condition.signal() }
        condition.unlock()
    }

    private func work() {
        let executor = asUnownedTaskExecutor()
        condition.lock()
        while true {
            if timers.earliest != nil {
                let now = Monotonic.now()
                while let due = timers.popDue(at: now) { ready.append(due) }
            }
            if let job = ready.popFirst() {
                // Another job waits: a sleeping worker takes it while this one runs.
                if !ready.isEmpty, idle > 0 { condition.signal() }
                condition.unlock()
                job.runSynchronously(on: executor)
                condition.lock()
                continue
            }
            idle += 1
            if let deadline = timers.earliest, watchedDeadline.map({ deadline < $0 }) ?? true {
                watchedDeadline = deadline
                condition.wait(until: deadline)
                if watchedDeadline == deadline { watchedDeadline = nil }
            } else {
                condition.wait(until: nil)
            }
            idle -= 1
        }
    }
}

/// The main executor's jobs (the main actor's), run on the process's main thread.
final class MainQueue: @unchecked Sendable {
    private let condition = Condition()
    private var jobs = JobQueue()
    private var status: Int32?

    func enqueue(_ job: UnownedJob) {
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

    /// Runs main-actor jobs on the calling (main) thread until the main task finishes; returns its status.
    func drainOnThisThread() -> Int32 {
        condition.lock()
        while true {
            if let job = jobs.popFirst() {
                condition.unlock()
                job.runSynchronously(on: MainActor.sharedUnownedExecutor)
                condition.lock()
                continue
            }
            if let status {
                condition.unlock()
                return status
            }
            condition.wait(until: nil)
        }
    }
}
