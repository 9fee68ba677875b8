import BrokerCore
import Logging
import Testing

@testable import BrokerPersistence

/// Revocations owed to the provider survive a restart wherever tokens are kept: in the state file
/// (`plaintext-file`) and, split from it, in the vault's item; never in a state file beside a vault.
@Suite("Revocations owed, at rest")
struct OwedRevocationsAtRestTests {
    static let owed = [
        PendingRevocation(clientId: "mail", token: .refreshToken("rt-old")),
        PendingRevocation(clientId: "mail", token: .deviceSecret("ds-old")),
    ]

    @Test func theStateFileKeepsThemInOrder() throws {
        let state = BrokerState(deviceId: "d-1", pendingRevocations: Self.owed)
        let loaded = try StateFileFormat.decode(StateFileFormat.encode(state).bytes)
        #expect(loaded.state.pendingRevocations == Self.owed)
        // None owed: no key at all, as an older brokerd wrote it.
        let none = StateFileFormat.encode(BrokerState(deviceId: "d-1")).bytes
        #expect(!String(decoding: none, as: UTF8.self).contains("pendingRevocations"))
    }

    @Test func anUnknownKindIsAnUnusableFile() {
        let bytes = Array(
            #"{"accounts":{},"clients":{},"deviceId":"d","pendingRevocations":[{"clientId":"m","kind":"x","token":"t"}],"version":2}"#
                .utf8)
        #expect(throws: StateFileFormat.Failure.self) { _ = try StateFileFormat.decode(bytes) }
    }

    @Test func aVaultKeepsThemOutOfTheFile() {
        let state = BrokerState(deviceId: "d-1", pendingRevocations: Self.owed)
        let (publicPart, tokens) = TokenProtectingStore.split(state)
        #expect(publicPart.pendingRevocations.isEmpty)
        #expect(!tokens.isEmpty)
        let merged = TokenProtectingStore.merge(publicPart, with: tokens, logger: Logger(label: "test"))
        #expect(merged.pendingRevocations == Self.owed)
    }
}
