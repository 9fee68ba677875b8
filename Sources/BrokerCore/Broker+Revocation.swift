/// Revocations the broker owes the provider (RFC 7009): every refresh token and device secret of
/// a sign-in that ended. They are part of the state from the sign-out's own write, so a broker
/// killed before the provider answered, or a provider that was down, still revokes them: after a
/// restart, or later with back-off, until the provider confirms or refuses for good.
extension Broker {
    /// At most this many revocations are kept owing; beyond it the oldest are given up.
    public static let maxPendingRevocations = 512
    /// The first retry after a failed revocation, doubled up to ``longestRevocationRetry``.
    static let firstRevocationRetry: Duration = .seconds(2)
    static let longestRevocationRetry: Duration = .seconds(30 * 60)

    /// Tries every owed revocation once, at once; what the provider confirmed (or said it cannot
    /// do) stops being owed. Returns, in words, what is still pending or failed for good; a retry
    /// is armed for what is pending.
    @discardableResult
    func revokeOwed(_ owed: [PendingRevocation]) async -> [String] {
        await tryOwed(owed).map(\.text)
    }

    /// ``revokeOwed(_:)``, each problem with whether it is still owed (pending) or settled for good.
    private func tryOwed(_ owed: [PendingRevocation]) async -> [(text: String, pending: Bool)] {
        guard !owed.isEmpty else { return [] }
        let provider = self.provider
        let outcomes = await withTaskGroup(of: (PendingRevocation, RevocationOutcome).self) { group in
            for item in owed {
                group.addTask {
                    do {
                        return (
                            item,
                            try await provider.revoke(clientId: item.clientId, token: item.token) == .done
                                ? .revoked : .notOffered
                        )
                    } catch let failure as BrokerFailure
                        where [.serverUnavailable, .serverError, .cancelled].contains(failure.code)
                    {
                        // Unanswered, or cut short by brokerd's stop: still owed, never forgotten.
                        return (item, .pending(failure.message))
                    } catch is CancellationError {
                        return (item, .pending("brokerd is stopping"))
                    } catch {
                        // A refusal (the provider's 4xx, an unknown client): asking again would get
                        // the same answer, so it is given up at once rather than owed for ever.
                        return (item, .refused(Self.describe(error)))
                    }
                }
            }
            return await group.reduce(into: [(PendingRevocation, RevocationOutcome)]()) { $0.append($1) }
        }
        var settled: [PendingRevocation] = []
        var revoked: Set<String> = []
        var problems: [(text: String, pending: Bool)] = []
        for (item, outcome) in outcomes {
            switch outcome {
            case .revoked:
                settled.append(item)
                // RFC 7009 answers 200 for a token the server does not know, too. A refresh token
                // is the provider's own, issued to this client: after a 200 it is dead there. A
                // device secret's revocation is no registered token type; a provider that cannot
                // revoke one may answer 200 all the same, so it leaves the files at once.
                if case .refreshToken(let value) = item.token { revoked.insert(value) }
            case .notOffered:
                settled.append(item)
                problems.append(("the provider offers no token revocation; refresh tokens expire on their own", false))
            case .refused(let why):
                settled.append(item)
                problems.append(("a token could not be revoked at the provider: \(why)", false))
            case .pending(let why):
                problems.append(
                    (
                        "token revocation is pending: the provider did not answer (\(why)); the broker tries again, "
                            + "also after a restart, until it does", true
                    ))
            }
        }
        settle(settled, revoked: revoked)
        if settled.count < owed.count { armRevocationRetry() }
        return problems
    }

    /// Tries what is owed now (at start, and once the token store opens).
    public func resumePendingRevocations() async {
        let owed = state.pendingRevocations
        guard !owed.isEmpty else { return }
        logger.notice("revoking tokens of sign-ins that ended earlier", metadata: ["tokens": "\(owed.count)"])
        for problem in Set(await revokeOwed(owed)) { logger.notice("revocation: \(problem)") }
    }

    /// Stops owing `settled`, written like any change (no announcement: no account changed).
    /// Refresh tokens the provider revoked (`revoked`, their values) leave the files with the
    /// next snapshot, not one written now: a revoked token grants nothing, and the rewrite (a
    /// file, its fsyncs, the directory's) would run while the apps are reading the sign-out.
    /// What it could not revoke may still grant access, and device secrets (see `revokeOwed`), so
    /// the store takes them out of its files at once.
    private func settle(_ settled: [PendingRevocation], revoked: Set<String>) {
        guard !settled.isEmpty else { return }
        var next = state
        next.pendingRevocations.removeAll { settled.contains($0) }
        guard next.pendingRevocations != state.pendingRevocations else { return }
        do {
            try commit(next, revoked: revoked)
            revocationRetryDelay = nil
        } catch {
            logger.warning(
                "could not record revocations as done; they are tried again", metadata: ["error": "\(error)"])
        }
    }

    /// One retry at a time, after a delay that doubles with each failure: a timer, never a poll.
    func armRevocationRetry() {
        guard revocationRetry == nil else { return }
        let delay = revocationRetryDelay.map { min($0 * 2, Self.longestRevocationRetry) } ?? Self.firstRevocationRetry
        revocationRetryDelay = delay
        revocationRetry = Task {
            try? await Task.sleep(for: delay)
            await self.retryRevocations()
        }
    }

    private func retryRevocations() async {
        revocationRetry = nil
        guard !Task.isCancelled, !state.pendingRevocations.isEmpty else { return }
        // What a retry gave up for good is said once, here; what stays pending is tried again
        // quietly (each failed request is logged where it is sent).
        let given = await tryOwed(state.pendingRevocations).filter { !$0.pending }.map(\.text)
        for problem in Set(given) { logger.notice("revocation: \(problem)") }
    }

    private enum RevocationOutcome: Sendable {
        case revoked, notOffered
        case pending(String)
        case refused(String)
    }
}

extension BrokerState {
    /// Adds `tokens` to what is owed, keeping at most ``Broker/maxPendingRevocations`` (the newest).
    public mutating func owe(_ tokens: [PendingRevocation]) {
        pendingRevocations.append(contentsOf: tokens.filter { !pendingRevocations.contains($0) })
        if pendingRevocations.count > Broker.maxPendingRevocations {
            pendingRevocations.removeFirst(pendingRevocations.count - Broker.maxPendingRevocations)
        }
    }
}
