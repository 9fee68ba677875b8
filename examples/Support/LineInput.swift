import Foundation

/// Standard input, one line at a time, read on a thread of its own (a blocking read never
/// occupies a Swift concurrency thread). One reader: ``next()`` is not called concurrently.
public final class LineInput: @unchecked Sendable {
    private let lock = NSLock()
    private var buffered: [String] = []
    private var ended = false
    private var waiter: CheckedContinuation<String?, Never>?

    /// Starts reading standard input.
    public init() {
        let reader = Thread { [self] in
            while let line = readLine(strippingNewline: true) { deliver(line) }
            deliver(nil)
        }
        reader.start()
    }

    private func deliver(_ line: String?) {
        lock.lock()
        if let waiter {
            self.waiter = nil
            lock.unlock()
            waiter.resume(returning: line)
            return
        }
        if let line { buffered.append(line) } else { ended = true }
        lock.unlock()
    }

    /// The next line, or nil at end of file.
    public func next() async -> String? {
        await withCheckedContinuation { continuation in
            lock.lock()
            if !buffered.isEmpty {
                let line = buffered.removeFirst()
                lock.unlock()
                continuation.resume(returning: line)
            } else if ended {
                lock.unlock()
                continuation.resume(returning: nil)
            } else {
                waiter = continuation
                lock.unlock()
            }
        }
    }
}
