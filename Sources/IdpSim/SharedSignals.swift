import Foundation

/// The Shared Signals transmitter's streams (SSF 1.0 §8.1), each owned by one confidential client
/// and delivered by polling (RFC 8936), with its queue of SETs awaiting acknowledgement.
///
/// Delivery is at least once: a polled SET stays queued until the receiver acknowledges it (or
/// reports an error for it), so an unacknowledged one is delivered again by the next poll.
actor SharedSignals {
    enum Status: String, Sendable, Codable, CaseIterable {
        case enabled, paused, disabled
    }

    struct QueuedSET: Sendable {
        var jti: String
        var jws: String
    }

    struct Stream: Sendable {
        var id: String
        /// The client that created it, which is also the `aud` of its SETs.
        var clientId: String
        var eventsRequested: [String]
        var description: String?
        var status = Status.enabled
        var reason: String?
        var queue: [QueuedSET] = []
        var acked = 0
        var lastDelivered: QueuedSET?

        var eventsDelivered: [String] { eventsRequested.filter(SecurityEventType.supportedURIs.contains) }
        var accepts: Bool { status != .disabled }
    }

    struct Poll: Sendable {
        var sets: [QueuedSET]
        var moreAvailable: Bool
        var acked: Int
    }

    private var streams: [String: Stream] = [:]

    /// A new stream, or nil when the client has one already (SSF §8.1.1.1: one per receiver here).
    func create(clientId: String, eventsRequested: [String], description: String?) -> Stream? {
        guard !streams.values.contains(where: { $0.clientId == clientId }) else { return nil }
        let stream = Stream(
            id: UUID().uuidString.lowercased(), clientId: clientId, eventsRequested: eventsRequested,
            description: description)
        streams[stream.id] = stream
        return stream
    }

    func stream(_ id: String) -> Stream? { streams[id] }

    func streams(of clientId: String) -> [Stream] {
        streams.values.filter { $0.clientId == clientId }.sorted { $0.id < $1.id }
    }

    func all() -> [Stream] { streams.values.sorted { $0.id < $1.id } }

    /// Deletes a stream and drops its queue; false when there is none.
    func delete(_ id: String) -> Bool { streams.removeValue(forKey: id) != nil }

    func deleteAll() -> Int {
        defer { streams = [:] }
        return streams.count
    }

    /// Sets the status of one stream, or of every stream when `id` is nil; returns the streams
    /// changed. A disabled stream holds no events (SSF §8.1.2), so its queue is dropped.
    func setStatus(_ status: Status, reason: String?, id: String?) -> [Stream] {
        let ids = id.map { streams[$0] == nil ? [] : [$0] } ?? Array(streams.keys)
        for id in ids {
            streams[id]?.status = status
            streams[id]?.reason = reason
            if status == .disabled { streams[id]?.queue = [] }
        }
        return ids.compactMap { streams[$0] }
    }

    /// The streams that take `eventURI` now: they requested it and are not disabled.
    func recipients(of eventURI: String) -> [Stream] {
        all().filter { $0.accepts && $0.eventsRequested.contains(eventURI) }
    }

    /// Queues a SET; false when the stream is gone or disabled.
    func enqueue(_ set: QueuedSET, on id: String) -> Bool {
        guard streams[id]?.accepts == true else { return false }
        streams[id]?.queue.append(set)
        return true
    }

    /// Queues again the SET last delivered on the stream, as a replaying attacker would.
    func replayLast(on id: String) -> QueuedSET? {
        guard let stream = streams[id], stream.accepts, let last = stream.lastDelivered else { return nil }
        streams[id]?.queue.append(last)
        return last
    }

    /// RFC 8936 §2.4: removes the acknowledged SETs and those the receiver reported errors for,
    /// then hands out up to `maxEvents` of the rest (none unless the stream is enabled); nil for
    /// an unknown stream.
    func poll(_ id: String, acknowledging acks: Set<String>, maxEvents: Int?) -> Poll? {
        guard var stream = streams[id] else { return nil }
        let before = stream.queue.count
        stream.queue.removeAll { acks.contains($0.jti) }
        let acked = before - stream.queue.count
        stream.acked += acked
        var sets: [QueuedSET] = []
        if stream.status == .enabled {
            sets = Array(stream.queue.prefix(max(0, maxEvents ?? stream.queue.count)))
            if let last = sets.last { stream.lastDelivered = last }
        }
        streams[id] = stream
        return Poll(
            sets: sets, moreAvailable: stream.status == .enabled && stream.queue.count > sets.count, acked: acked)
    }
}
