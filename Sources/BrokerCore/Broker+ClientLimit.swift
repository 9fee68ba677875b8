/// The bound on remembered clientIds. In open mode any app may name a new clientId, and its first
/// call leaves a record (what it saw last) in memory and in every write of the state. Records that
/// hold nothing else are kept up to ``BrokerConfiguration/maxClients``; a forgotten app is a new
/// app on its next call, and so misses the cue that the person it saw has left (its previous
/// account). So one app naming clientId after clientId forgets its own records, not the others':
/// past the bound, the program whose calls made the most such records loses its least recently
/// active first, and only between programs of equal count does the oldest go first. Records
/// holding an account, tokens or a single sign-on anchor are never forgotten: each came from the
/// provider, which issues tokens to the clients it knows only.
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
        if clientProgram.count > next.clients.count * 2 {
            clientProgram = clientProgram.filter { next.clients[$0.key] != nil }
        }
        guard known.count > configuration.maxClients else { return known }
        let anchors = Set(next.singleSignOn.values.map(\.anchorClientId))
        let candidates = known.subtracting(anchors)
        let excess = candidates.count - configuration.maxClients
        guard excess > 0 else { return known }
        let forgotten = leastValued(candidates, count: excess)
        for clientId in forgotten {
            next.clients[clientId] = nil
            clientActivity[clientId] = nil
            clientProgram[clientId] = nil
            known.remove(clientId)
        }
        logger.notice(
            "too many clientIds: the least recently active were forgotten",
            metadata: ["forgotten": "\(forgotten.count)", "limit": "\(configuration.maxClients)"])
        return known
    }

    /// `count` of `candidates` to forget: each from the program holding the most of them (a
    /// record of no known program is a program of its own), its least recently active; between
    /// programs holding as many, the least recently active record of all.
    private func leastValued(_ candidates: Set<String>, count: Int) -> [String] {
        let activity = { (clientId: String) in (self.clientActivity[clientId] ?? 0, clientId) }
        var byProgram: [String: [String]] = [:]
        for clientId in candidates {
            byProgram[clientProgram[clientId] ?? "clientId " + clientId, default: []].append(clientId)
        }
        // Newest first, so that the least recently active is the cheap removeLast().
        for key in byProgram.keys { byProgram[key]?.sort { activity($0) > activity($1) } }
        var chosen: [String] = []
        while chosen.count < count {
            guard
                let key = byProgram.max(by: { a, b in
                    a.value.count != b.value.count
                        ? a.value.count < b.value.count
                        : activity(a.value.last ?? "") > activity(b.value.last ?? "")
                })?.key,
                let clientId = byProgram[key]?.popLast()
            else { break }
            chosen.append(clientId)
            if byProgram[key]?.isEmpty == true { byProgram[key] = nil }
        }
        return chosen
    }

    /// A record holding nothing but what its app saw last.
    private static func isBystander(_ record: ClientRecord) -> Bool {
        record.account == nil && record.refreshToken == nil && record.accessTokens.isEmpty
    }
}
