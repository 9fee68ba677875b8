/// The bound on remembered clientIds. In open mode any app may name a new clientId, and its first
/// call leaves a record (what it saw last) in memory and in every write of the state. Records that
/// hold nothing else are kept up to ``BrokerConfiguration/maxClients``, the least recently active
/// forgotten first; a forgotten app is a new app on its next call. Records holding an account,
/// tokens or a single sign-on anchor are never forgotten: each came from the provider, which
/// issues tokens to the clients it knows only.
extension Broker {
    /// Stamps the clients whose record `next` changes, and forgets the least recently active of
    /// those holding nothing but what they saw, beyond the bound.
    func noteActiveClients(from previous: BrokerState, to next: inout BrokerState) {
        for (clientId, record) in next.clients where previous.clients[clientId] != record {
            activityCounter &+= 1
            clientActivity[clientId] = activityCounter
        }
        if clientActivity.count > next.clients.count * 2 {
            clientActivity = clientActivity.filter { next.clients[$0.key] != nil }
        }
        guard next.clients.count > configuration.maxClients else { return }
        let anchors = Set(next.singleSignOn.values.map(\.anchorClientId))
        let bystanders = next.clients.filter { clientId, record in
            record.account == nil && record.refreshToken == nil && record.accessTokens.isEmpty
                && !anchors.contains(clientId)
        }
        let excess = bystanders.count - configuration.maxClients
        guard excess > 0 else { return }
        let forgotten = bystanders.keys.sorted {
            (clientActivity[$0] ?? 0, $0) < (clientActivity[$1] ?? 0, $1)
        }.prefix(excess)
        for clientId in forgotten {
            next.clients[clientId] = nil
            clientActivity[clientId] = nil
        }
        logger.notice(
            "too many clientIds: the least recently active were forgotten",
            metadata: ["forgotten": "\(forgotten.count)", "limit": "\(configuration.maxClients)"])
    }
}
