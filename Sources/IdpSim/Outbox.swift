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
