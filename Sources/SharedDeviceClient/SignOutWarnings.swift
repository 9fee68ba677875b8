import BrokerAPI
import DBus

/// A warning that the device will be signed out without anyone asking (`SignOutPending`,
/// `SignOutCancelled`): an app shows a countdown, and may offer "Stay signed in" (any activity
/// the desktop sees cancels it).
public enum SignOutWarning: Sendable, Equatable {
    /// The device is signed out at `deadline` (microseconds of the realtime clock, as
    /// `clock_gettime(CLOCK_REALTIME)` gives them) unless the person is active first.
    case pending(reason: SignOutCause, deadline: UInt64)
    /// The pending sign-out will not happen: the person was active.
    case cancelled(reason: SignOutCause)
}

extension PublicClientApplication {
    /// The broker's sign-out warnings, from the moment this returns (the bus has the match rules)
    /// until the consumer stops or the connection to the bus ends (the sequence then ends too);
    /// first the warning in progress, if one is (the `SignOutDeadline` property). Beside
    /// ``accountChanges``, which then reports the sign-out itself.
    public func signOutWarnings() async throws(BrokerError) -> AsyncStream<SignOutWarning> {
        let connection = try link.connection()
        let pending = try await connection.signals(
            Broker1Signals.SignOutPending.rule(), as: Broker1Signals.SignOutPending.init)
        let cancelled = try await connection.signals(
            Broker1Signals.SignOutCancelled.rule(), as: Broker1Signals.SignOutCancelled.init)
        let now = try? await link.signOutDeadlineProperty(timeout: configuration.queryTimeout)
        let (stream, continuation) = AsyncStream<SignOutWarning>.makeStream(bufferingPolicy: .unbounded)
        if let deadline = now, deadline > 0 {
            continuation.yield(.pending(reason: .idle, deadline: deadline))
        }
        let readers = [
            Task {
                for await signal in pending {
                    if let reason = SignOutCause(rawValue: signal.reason) {
                        continuation.yield(.pending(reason: reason, deadline: signal.deadline))
                    }
                }
                // The connection went away: the consumer must hear that no warning will come.
                continuation.finish()
            },
            Task {
                for await signal in cancelled {
                    if let reason = SignOutCause(rawValue: signal.reason) {
                        continuation.yield(.cancelled(reason: reason))
                    }
                }
                continuation.finish()
            },
        ]
        continuation.onTermination = { _ in for reader in readers { reader.cancel() } }
        return stream
    }
}
