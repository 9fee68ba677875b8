#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs `body` on a new detached thread of its own; 0 when it started, else `pthread_create`'s
/// error (`EAGAIN`: the user's thread limit), for the caller's message. The one way a layer starts
/// a thread that blocks on its own work (the bus connection's, the HTTP worker, the reader of
/// brokerd's stop signals, the task pool's), so that no Swift concurrency thread is ever held up.
public func startDetachedThread(_ body: @escaping @Sendable () -> Void) -> Int32 {
    final class Box {
        let body: @Sendable () -> Void
        init(body: @escaping @Sendable () -> Void) {
            self.body = body
        }
    }
    let box = Unmanaged.passRetained(Box(body: body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(
        &thread, nil,
        { raw in
            guard let raw else { return nil }
            let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
            box.body()
            return nil
        }, box)
    guard rc == 0 else {
        Unmanaged<Box>.fromOpaque(box).release()
        return rc
    }
    pthread_detach(thread)
    return 0
}
