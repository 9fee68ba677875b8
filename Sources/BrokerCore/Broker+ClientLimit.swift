/// The bound on remembered clientIds. In open mode any app may name a new clientId, and its first
/// call leaves a record (what it saw last) in memory and in every write of the state. Records that
/// hold nothing else are kept up to ``BrokerConfiguration/maxClients``, the least recently active
/// forgotten first; a forgotten app is a new app on its next call. Records holding an account,
/// tokens or a single sign-on anchor are never forgotten: each came from the provider, which
/// issues tokens to the clients it knows only.
extension Broker {
    /// Stamps the clients whose record `next` changes, and forgets the least recently active of
    /// those holding nothing but what they saw, beyond the bound. Looks at each client once, and
    /// at an unchanged one by identity only (``ClientRecord`` shares its storage until changed).
    /// Returns the bystanders of `next`, which become ``bystanders`` once `next` is written.
    func noteActiveClients(from previous: BrokerState, to next: inout BrokerState) -> Set<String> {
        var known = bystanders ?? Set(previous.clients.filter { Self.isBystander($0.value) }.keys)
        var added = 0
        for (clientId, record) in next.clients {
            let before = previous.clients[clientId]
            if before == nil { added += 1 } else if before == record { continue }
            activityCounter &+= 1
            clientActivity[clientId] = activityCounter
            if Self.isBystander(record) { known.insert(clientId) } else { known.remove(clientId) }
        }
        // Fewer records than the old ones plus the new: some were removed.
        if next.clients.count < previous.clients.count + added {
            for clientId in previous.clients.keys where next.clients[clientId] == nil { known.remove(clientId) }
        }
        if clientActivity.count > next.clients.count * 2 {
            clientActivity = clientActivity.filter { next.clients[$0.key] != nil }
        }
        guard known.count > configuration.maxClients else { return known }
        let anchors = Set(next.singleSignOn.values.map(\.anchorClientId))
        let candidates = known.subtracting(anchors)
        let excess = candidates.count - configuration.maxClients
        guard excess > 0 else { return known }
        let forgotten = candidates.sorted {
            (clientActivity[$0] ?? 0, $0) < (clientActivity[$1] ?? 0, $1)
        }.prefix(excess)
        for clientId in forgotten {
            next.clients[clientId] = nil
            clientActivity[clientId] = nil
            known.remove(clientId)
        }
        logger.notice(
            "too many clientIds: the least recently active were forgotten",
            metadata: ["forgotten": "\(forgotten.count)", "limit": "\(configuration.maxClients)"])
        return known
    }

    /// A record holding nothing but what its app saw last.
    private static func isBystander(_ record: ClientRecord) -> Bool {
        record.account == nil && record.refreshToken == nil && record.accessTokens.isEmpty
    }
}
