/// The bound on remembered clientIds. In open mode any app may name a new clientId, and each
/// costs memory and a record in every write of the state: past ``BrokerConfiguration/maxClients``
/// the least recently active are forgotten, those holding nothing but what they saw last first.
/// A forgotten client's refresh token is owed a revocation; the device's sign-in is untouched.
extension Broker {
    /// Stamps the clients whose record `next` changes, and forgets the least recently active
    /// beyond the bound.
    func noteActiveClients(from previous: BrokerState, to next: inout BrokerState) {
        for (clientId, record) in next.clients where previous.clients[clientId] != record {
            activityCounter &+= 1
            clientActivity[clientId] = activityCounter
        }
        let excess = next.clients.count - configuration.maxClients
        guard excess > 0 else {
            if clientActivity.count > next.clients.count * 2 {
                clientActivity = clientActivity.filter { next.clients[$0.key] != nil }
            }
            return
        }
        let anchors = Set(next.singleSignOn.values.map(\.anchorClientId))
        let forgotten = next.clients.map { clientId, record in
            (
                clientId, holds: record.account != nil || record.refreshToken != nil || anchors.contains(clientId),
                seen: clientActivity[clientId] ?? 0
            )
        }
        .sorted { ($0.holds ? 1 : 0, $0.seen, $0.0) < ($1.holds ? 1 : 0, $1.seen, $1.0) }
        .prefix(excess).map(\.0)
        var owed = false
        for clientId in forgotten {
            if let token = next.clients[clientId]?.refreshToken {
                next.owe([PendingRevocation(clientId: clientId, token: .refreshToken(token))])
                owed = true
            }
            next.clients[clientId] = nil
            clientActivity[clientId] = nil
        }
        if owed { armRevocationRetry() }
        logger.notice(
            "too many clientIds: the least recently active were forgotten",
            metadata: ["forgotten": "\(forgotten.count)", "limit": "\(configuration.maxClients)"])
    }
}
