import Foundation

/// One-time codes "sent" by email. Tests read them from the test-only `GET /test/outbox`.
actor Outbox {
    struct Message: Codable, Sendable {
        var username: String
        var code: String
        /// Unix seconds.
        var sentAt: Int
    }

    private var sent: [Message] = []

    func send(code: String, to username: String) {
        sent.append(Message(username: username, code: code, sentAt: Int(Date().timeIntervalSince1970)))
    }

    func messages() -> [Message] {
        sent
    }
}

/// The browser's requests to the authorization and end-session endpoints (path and query), newest
/// last, at most 100: what a browser test checks when brokerd hands the browser only a one-time
/// local address that redirects there. Tests read them from the test-only `GET /test/browser-requests`.
actor BrowserRequests {
    private var seen: [String] = []

    func record(_ target: String) {
        seen.append(target)
        if seen.count > 100 { seen.removeFirst(seen.count - 100) }
    }

    func all() -> [String] { seen }
}
