import CDBus
import Glibc
import Locking
import Logging
import TextRules

/// How a call's outcome is handed back: called exactly once, on the connection thread (or on the
/// thread that tried to queue the call when the connection is closed). It must not block.
typealias ReplyHandler = @Sendable (Result<[DBusValue], any Error>) -> Void

/// Work handed to the connection thread.
enum LoopCommand: Sendable {
    case send(MessageRef)
    case call(id: UInt64, MessageRef, deadline: UInt64, ReplyHandler)
    case cancelCall(id: UInt64)
    case subscribe(id: UInt64, DBusMatchRule, AsyncStream<DBusSignal>.Continuation)
    case unsubscribe(id: UInt64)
    case close
}

/// The one thread that owns a libdbus connection.
///
/// Other threads only touch the lock-protected command queue and write one
/// byte to the wake-up pipe. The thread runs a poll() loop over the bus socket
/// and the pipe, sends queued messages, reads and dispatches incoming ones
/// through a libdbus filter function, and fails calls whose deadline passed.
final class ConnectionLoop: @unchecked Sendable {
    let logger: Logger
    let objects = ObjectRegistry()

    // Shared state, guarded by `lock`.
    private let lock = Locked(())
    private var queue: [LoopCommand] = []
    private var accepting = true
    private var nextID: UInt64 = 0
    private var disconnectWaiters: [CheckedContinuation<Void, Never>] = []
    /// The connection thread, once it runs: `callBlocking` refuses to wait on it.
    private var loopThread: pthread_t?
    private let wakeRead: Int32
    private let wakeWrite: Int32

    // Thread-confined state: only touched by the connection thread (and by init before it starts).
    private let connection: OpaquePointer
    private let busFD: Int32
    private struct Pending {
        var id: UInt64
        var deadline: UInt64
        var complete: ReplyHandler
    }
    private var pending: [UInt32: Pending] = [:]
    private var serialOfCall: [UInt64: UInt32] = [:]
    private var cancelledBeforeSend: Set<UInt64> = []
    private var subscriptions: [UInt64: (rule: DBusMatchRule, continuation: AsyncStream<DBusSignal>.Continuation)] = [:]
    /// The owner now of each well-known name a subscription's sender names, and how many
    /// subscriptions name it. Learnt from the bus alone (GetNameOwner, then the driver's
    /// NameOwnerChanged), in the order the bus sent them, on this thread: a reply and a change
    /// are applied as they are read, so the answer is never older than a change read before it.
    /// `asked` tells this following's GetNameOwner from an earlier one's, still on its way after
    /// the name was unfollowed and followed again.
    private var followed: [String: (owner: String?, subscriptions: Int, asked: UInt64)] = [:]
    private var stopRequested = false
    private var drained: [LoopCommand] = []
    /// libdbus's watches on the bus socket: what it wants to be told (readable, writable), so
    /// that the loop's one poll() covers them and `dbus_watch_handle` reads or writes without a
    /// poll of its own. Added when the watch functions are installed (by `start`, before the
    /// thread runs) and removed when the connection closes (on the thread).
    fileprivate var watches: [OpaquePointer] = []
    /// Bumped when a watch is added or removed: handling one may remove the others.
    fileprivate var watchesChanged: UInt64 = 0

    /// Takes ownership of an open, registered private connection.
    init(connection: OpaquePointer, logger: Logger) throws(DBusError) {
        self.connection = connection
        self.logger = logger
        var fd: Int32 = -1
        guard dbus_connection_get_unix_fd(connection, &fd) != 0, fd >= 0 else {
            throw .failed("Bus connection has no file descriptor")
        }
        busFD = fd
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw .failed("pipe() failed: errno \(errno)") }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        for f in fds {
            _ = fcntl(f, F_SETFL, O_NONBLOCK)
            _ = fcntl(f, F_SETFD, FD_CLOEXEC)
        }
    }

    /// Installs the filter and starts the thread (which keeps `self` alive until it ends).
    func start() throws(DBusError) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard dbus_connection_add_filter(connection, connectionFilter, me, nil) != 0,
            dbus_connection_set_watch_functions(connection, addWatch, removeWatch, watchToggled, me, nil) != 0
        else {
            throw .noMemory()
        }
        let rc = startDetachedThread { [self] in run() }
        guard rc == 0 else { throw .failed("Cannot start the D-Bus thread (error \(rc))") }
    }

    // MARK: Producer side (any thread)

    func makeID() -> UInt64 {
        lock.withLock { _ in
            nextID &+= 1
            return nextID
        }
    }

    /// Queues work for the thread; false when the connection is closed.
    @discardableResult
    func enqueue(_ command: LoopCommand) -> Bool {
        lock.withLock { _ in
            guard accepting else { return false }
            queue.append(command)
            if queue.count == 1 {
                var byte: UInt8 = 1
                _ = write(wakeWrite, &byte, 1)  // EAGAIN means a wake-up is already pending
            }
            return true
        }
    }

    /// Sends a message without waiting for a reply; drops it when closed.
    func send(_ message: MessageRef) {
        if !enqueue(.send(message)) { message.release() }
    }

    /// Sends a message from the connection thread itself: straight to libdbus, which the loop
    /// flushes before it polls again. Only the connection thread may call this.
    func sendFromLoopThread(_ message: MessageRef) {
        if dbus_connection_send(connection, message.raw, nil) == 0 {
            logger.error("dbus_connection_send failed (out of memory)")
        }
        message.release()
    }

    /// Whether the connection still accepts work.
    var isOpen: Bool { lock.withLock { _ in accepting } }

    /// Returns once the connection is closed or dropped.
    func waitUntilClosed() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let closedAlready = lock.withLock { _ in
                if accepting {
                    disconnectWaiters.append(c)
                    return false
                }
                return true
            }
            if closedAlready { c.resume() }
        }
    }

    func requestClose() { enqueue(.close) }

    /// Queues a call whose outcome goes to `complete` (exactly once): the reply, an error reply,
    /// NoReply once `deadline` (monotonic ns) passes, Disconnected, or CancellationError after
    /// `.cancelCall(id)`. Takes ownership of `message`.
    func startCall(id: UInt64, _ message: MessageRef, deadline: UInt64, complete: @escaping ReplyHandler) {
        if !enqueue(.call(id: id, message, deadline: deadline, complete)) {
            message.release()
            complete(.failure(DBusError.disconnected()))
        }
    }

    /// Sends a call and waits for its reply, deadline or cancellation.
    func call(_ message: MessageRef, timeout: Duration) async throws -> [DBusValue] {
        if Task.isCancelled {
            message.release()
            throw CancellationError()
        }
        let id = makeID()
        let deadline = monotonicNanoseconds() &+ timeout.clampedNanoseconds
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                startCall(id: id, message, deadline: deadline) { continuation.resume(with: $0) }
            }
        } onCancel: {
            enqueue(.cancelCall(id: id))
        }
    }

    /// Sends a call and blocks the calling thread until its reply, its deadline or the connection's
    /// end. The reply is handed over by the connection thread through a condition variable, so
    /// nothing here needs Swift's cooperative pool: a pool thread may wait here (it is tied up for
    /// the round trip) without risking the deadlock an async call awaited synchronously would.
    ///
    /// The loop fails the call with NoReply at `timeout`; should the loop itself be wedged, the
    /// waiter gives up one second later on its own, cancels the call and throws NoReply.
    /// Refuses (Failed) to run on the connection thread itself, which would wait for itself.
    func callBlocking(_ message: MessageRef, timeout: Duration) throws -> [DBusValue] {
        let onLoopThread: Bool = lock.withLock { _ in loopThread.map { pthread_equal($0, pthread_self()) != 0 } ?? false
        }
        if onLoopThread {
            message.release()
            throw DBusError.failed(
                "callBlocking on the connection's own thread would wait for itself; use call() there")
        }
        let id = makeID()
        let now = monotonicNanoseconds()
        let deadline = now &+ timeout.clampedNanoseconds
        let waiter = BlockingReply()
        startCall(id: id, message, deadline: deadline) { waiter.deliver($0) }
        guard let result = waiter.wait(until: deadline &+ 1_000_000_000) else {
            enqueue(.cancelCall(id: id))
            throw DBusError.noReply(
                "Did not receive a reply within the call timeout (the connection thread did not answer)")
        }
        return try result.get()
    }

    // MARK: The thread

    private func run() {
        lock.withLock { _ in loopThread = pthread_self() }
        var fds: [pollfd] = []
        var polled: [OpaquePointer] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        var reason = "Connection closed"
        while true {
            processCommands()
            if stopRequested { break }
            while dbus_connection_dispatch(connection) == DBUS_DISPATCH_DATA_REMAINS {}
            // The replies just made leave now, not after another poll.
            if dbus_connection_has_messages_to_send(connection) != 0 { writeNow() }
            guard dbus_connection_get_is_connected(connection) != 0 else {
                reason = "Disconnected from the bus"
                logger.info("D-Bus connection dropped")
                break
            }
            let timeout = expireCalls()
            fds.removeAll(keepingCapacity: true)
            polled.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
            for watch in watches where dbus_watch_get_enabled(watch) != 0 {
                let flags = dbus_watch_get_flags(watch)
                var events: Int16 = 0
                if flags & DBUS_WATCH_READABLE.rawValue != 0 { events |= Int16(POLLIN) }
                if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: dbus_watch_get_unix_fd(watch), events: events, revents: 0))
                polled.append(watch)
            }
            let rc = poll(&fds, nfds_t(fds.count), timeout)
            if rc < 0 {
                if errno == EINTR { continue }
                logger.error("poll() failed", metadata: ["errno": "\(errno)"])
                reason = "poll() failed"
                break
            }
            if fds[0].revents != 0 {
                while read(wakeRead, &buffer, buffer.count) > 0 {}
            }
            let generation = watchesChanged
            for (index, watch) in polled.enumerated() where fds[index + 1].revents != 0 {
                let revents = Int32(fds[index + 1].revents)
                var flags: UInt32 = 0
                if revents & Int32(POLLIN) != 0 { flags |= DBUS_WATCH_READABLE.rawValue }
                if revents & Int32(POLLOUT) != 0 { flags |= DBUS_WATCH_WRITABLE.rawValue }
                if revents & Int32(POLLERR) != 0 { flags |= DBUS_WATCH_ERROR.rawValue }
                if revents & Int32(POLLHUP) != 0 { flags |= DBUS_WATCH_HANGUP.rawValue }
                _ = dbus_watch_handle(watch, flags)
                // A handled watch may have closed the connection and freed the others.
                if watchesChanged != generation { break }
            }
        }
        shutdown(reason: reason, flush: stopRequested)
    }

    /// Writes what libdbus has queued through its write watch, without polling first: the socket
    /// almost always has room, and when it has not, the watch stays enabled for the next poll.
    private func writeNow() {
        let writer = watches.first { dbus_watch_get_flags($0) & DBUS_WATCH_WRITABLE.rawValue != 0 }
        if let writer {
            _ = dbus_watch_handle(writer, DBUS_WATCH_WRITABLE.rawValue)
        } else {
            _ = dbus_connection_read_write(connection, 0)
        }
    }

    private func processCommands() {
        lock.withLock { _ in swap(&queue, &drained) }
        guard !drained.isEmpty else { return }
        for command in drained { handle(command) }
        drained.removeAll(keepingCapacity: true)
    }

    private func handle(_ command: LoopCommand) {
        switch command {
        case .send(let message):
            sendFromLoopThread(message)
        case .call(let id, let message, let deadline, let complete):
            defer { message.release() }
            if cancelledBeforeSend.remove(id) != nil {
                complete(.failure(CancellationError()))
                return
            }
            var serial: UInt32 = 0
            guard dbus_connection_send(connection, message.raw, &serial) != 0 else {
                complete(.failure(DBusError.noMemory()))
                return
            }
            pending[serial] = Pending(id: id, deadline: deadline, complete: complete)
            serialOfCall[id] = serial
        case .cancelCall(let id):
            if let serial = serialOfCall.removeValue(forKey: id) {
                pending.removeValue(forKey: serial)?.complete(.failure(CancellationError()))
            } else {
                cancelledBeforeSend.insert(id)
            }
        case .subscribe(let id, let rule, let continuation):
            subscriptions[id] = (rule, continuation)
            if let name = rule.followedName { follow(name) }
        case .unsubscribe(let id):
            if let removed = subscriptions.removeValue(forKey: id), let name = removed.rule.followedName {
                unfollow(name)
            }
        case .close:
            stopRequested = true
        }
    }

    // MARK: Owners of well-known names (connection thread)

    /// The driver's NameOwnerChanged for `name` alone.
    private static func ownerChanges(of name: String) -> String {
        DBusNameOwnerChange.rule(for: name).ruleString
    }

    /// Starts following `name`'s owner, or counts one more subscription naming it. The match rule
    /// and the question leave before the subscription's own AddMatch, whose reply `signals`
    /// awaits: by then the bus has answered who owns the name.
    private func follow(_ name: String) {
        if followed[name] != nil {
            followed[name]?.subscriptions += 1
            return
        }
        let asked = makeID()
        followed[name] = (nil, 1, asked)
        let driver = (destination: DBusMatchRule.busDriver, path: "/org/freedesktop/DBus")
        guard
            let match = try? MessageBuilder.methodCall(
                destination: driver.destination, path: driver.path, interface: DBusMatchRule.busDriver,
                member: "AddMatch", arguments: [.string(Self.ownerChanges(of: name))]),
            let question = try? MessageBuilder.methodCall(
                destination: driver.destination, path: driver.path, interface: DBusMatchRule.busDriver,
                member: "GetNameOwner", arguments: [.string(name)])
        else {
            logger.error("cannot follow the owner of a bus name", metadata: ["name": "\(name)"])
            return
        }
        dbus_message_set_no_reply(match.raw, 1)
        sendFromLoopThread(match)
        // Called on this thread, in the bus's order (see `followed`). No owner (NameHasNoOwner)
        // or no answer leaves nil: a signal claiming the name is then believed from nobody.
        handle(
            .call(id: asked, question, deadline: monotonicNanoseconds() &+ 25_000_000_000) { [self] result in
                guard followed[name]?.asked == asked else { return }
                if case .success(let values) = result, case .string(let owner)? = values.first {
                    followed[name]?.owner = owner
                } else {
                    followed[name]?.owner = nil
                }
            })
    }

    private func unfollow(_ name: String) {
        guard let entry = followed[name] else { return }
        guard entry.subscriptions <= 1 else {
            followed[name]?.subscriptions -= 1
            return
        }
        followed.removeValue(forKey: name)
        if let message = try? MessageBuilder.methodCall(
            destination: DBusMatchRule.busDriver, path: "/org/freedesktop/DBus", interface: DBusMatchRule.busDriver,
            member: "RemoveMatch", arguments: [.string(Self.ownerChanges(of: name))])
        {
            dbus_message_set_no_reply(message.raw, 1)
            sendFromLoopThread(message)
        }
    }

    /// Applies the driver's NameOwnerChanged to a followed name; anyone else's is ignored here
    /// (the sender is the bus's to set, so `org.freedesktop.DBus` cannot be claimed).
    private func noteOwnerChange(_ signal: DBusSignal) {
        guard let change = DBusNameOwnerChange(signal), followed[change.name] != nil else { return }
        followed[change.name]?.owner = change.newOwner
    }

    /// Fails calls past their deadline; returns the poll timeout in ms (-1: none).
    private func expireCalls() -> Int32 {
        guard !pending.isEmpty else { return -1 }
        let now = monotonicNanoseconds()
        var next = UInt64.max
        var expired: [UInt32] = []
        for (serial, call) in pending {
            if call.deadline <= now { expired.append(serial) } else { next = min(next, call.deadline) }
        }
        for serial in expired {
            if let call = pending.removeValue(forKey: serial) {
                serialOfCall.removeValue(forKey: call.id)
                call.complete(.failure(DBusError.noReply("Did not receive a reply within the call timeout")))
            }
        }
        guard next != .max else { return -1 }
        let ms = (next - now + 999_999) / 1_000_000
        return Int32(min(ms, UInt64(Int32.max)))
    }

    private func shutdown(reason: String, flush: Bool) {
        let (leftover, waiters) = lock.withLock { _ in
            accepting = false
            let result = (queue, disconnectWaiters)
            queue = []
            disconnectWaiters = []
            return result
        }
        if flush {
            // Bounded flush of what was already queued in libdbus.
            let deadline = monotonicNanoseconds() &+ 1_000_000_000
            for command in leftover { if case .send = command { handle(command) } }
            while dbus_connection_has_messages_to_send(connection) != 0,
                dbus_connection_get_is_connected(connection) != 0
            {
                let now = monotonicNanoseconds()
                guard now < deadline else { break }
                var pfd = pollfd(fd: busFD, events: Int16(POLLOUT), revents: 0)
                _ = poll(&pfd, 1, Int32((deadline - now) / 1_000_000 + 1))
                _ = dbus_connection_read_write(connection, 0)
            }
        }
        let error = DBusError.disconnected(reason)
        for command in leftover {
            switch command {
            case .send(let message): if !flush { message.release() }
            case .call(_, let message, _, let complete):
                message.release()
                complete(.failure(error))
            case .subscribe(_, _, let continuation): continuation.finish()
            case .cancelCall, .unsubscribe, .close: break
            }
        }
        for (_, call) in pending { call.complete(.failure(error)) }
        pending = [:]
        serialOfCall = [:]
        let subs = subscriptions
        subscriptions = [:]
        followed = [:]
        for (_, sub) in subs { sub.continuation.finish() }
        dbus_connection_remove_filter(connection, connectionFilter, Unmanaged.passUnretained(self).toOpaque())
        dbus_connection_close(connection)
        dbus_connection_unref(connection)
        close(wakeRead)
        close(wakeWrite)
        for waiter in waiters { waiter.resume() }
        logger.debug("D-Bus connection thread finished", metadata: ["reason": "\(reason)"])
    }

    // MARK: Incoming messages (connection thread, from dispatch)

    fileprivate func handleIncoming(_ raw: OpaquePointer) -> DBusHandlerResult {
        switch dbus_message_get_type(raw) {
        case Int32(CDBUS_MESSAGE_TYPE_METHOD_RETURN), Int32(CDBUS_MESSAGE_TYPE_ERROR):
            guard let call = pending.removeValue(forKey: dbus_message_get_reply_serial(raw)) else {
                return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
            }
            serialOfCall.removeValue(forKey: call.id)
            if dbus_message_get_type(raw) == Int32(CDBUS_MESSAGE_TYPE_ERROR) {
                let name = dbus_message_get_error_name(raw).map { String(cString: $0) } ?? DBusError.failed("").name
                var text = ""
                if let args = try? DBusCodec.decodeArguments(raw), case .string(let s)? = args.first { text = s }
                call.complete(.failure(DBusError(name: name, message: text)))
            } else {
                do {
                    call.complete(.success(try DBusCodec.decodeArguments(raw)))
                } catch {
                    call.complete(.failure(error))
                }
            }
            return DBUS_HANDLER_RESULT_HANDLED
        case Int32(CDBUS_MESSAGE_TYPE_SIGNAL):
            if dbus_message_is_signal(raw, "org.freedesktop.DBus.Local", "Disconnected") != 0 {
                return DBUS_HANDLER_RESULT_HANDLED  // the loop notices via get_is_connected
            }
            guard !subscriptions.isEmpty else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
            let header = DBusMessage(header: raw)
            guard let arguments = try? DBusCodec.decodeArguments(raw) else {
                logger.debug("Dropping undecodable signal", metadata: ["member": "\(header.member ?? "")"])
                return DBUS_HANDLER_RESULT_HANDLED
            }
            let signal = DBusSignal(
                sender: header.sender ?? "", path: header.path ?? "", interface: header.interface ?? "",
                member: header.member ?? "", arguments: arguments)
            if !followed.isEmpty { noteOwnerChange(signal) }
            let ownerOf = { (name: String) in self.followed[name]?.owner ?? nil }
            var refused: DBusMatchRule?
            for (_, sub) in subscriptions where sub.rule.matchesContent(signal) {
                if sub.rule.isFromSender(signal, ownerOf: ownerOf) {
                    sub.continuation.yield(signal)
                } else {
                    refused = sub.rule
                }
            }
            if let refused, let claimed = refused.sender {
                // Debug only: a flood of forged signals must not become a flood of log lines.
                logger.debug(
                    "ignored a signal claiming a sender it is not from",
                    metadata: [
                        "member": "\(OutsideText.escaped(signal.interface)).\(OutsideText.escaped(signal.member))",
                        "claimed": "\(claimed)", "owner": "\(ownerOf(claimed) ?? "none")", "from": "\(signal.sender)",
                    ])
            }
            return DBUS_HANDLER_RESULT_HANDLED
        case Int32(CDBUS_MESSAGE_TYPE_METHOD_CALL):
            dispatchMethodCall(raw)
            return DBUS_HANDLER_RESULT_HANDLED
        default:
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
    }
}

/// libdbus watch functions: the loop keeps the watches and polls them itself.
private let addWatch: DBusAddWatchFunction = { watch, userData in
    guard let watch, let userData else { return 0 }
    let loop = Unmanaged<ConnectionLoop>.fromOpaque(userData).takeUnretainedValue()
    loop.watches.append(watch)
    loop.watchesChanged &+= 1
    return 1
}

private let removeWatch: DBusRemoveWatchFunction = { watch, userData in
    guard let watch, let userData else { return }
    let loop = Unmanaged<ConnectionLoop>.fromOpaque(userData).takeUnretainedValue()
    loop.watches.removeAll { $0 == watch }
    loop.watchesChanged &+= 1
}

/// Nothing to do: the loop reads each watch's enabled state before every poll.
private let watchToggled: DBusWatchToggledFunction = { _, _ in }

/// libdbus filter: forwards every dispatched message to its loop.
private let connectionFilter: DBusHandleMessageFunction = { _, message, userData in
    guard let message, let userData else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    let loop = Unmanaged<ConnectionLoop>.fromOpaque(userData).takeUnretainedValue()
    return loop.handleIncoming(message)
}
