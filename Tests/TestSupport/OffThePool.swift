import Foundation

/// Runs a blocking wait on a thread of its own, so that it never holds one of the few threads of
/// Swift's shared pool (two on a two-core machine) while in-process work it waits for needs one.
@discardableResult
package func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
