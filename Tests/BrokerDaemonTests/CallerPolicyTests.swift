import BrokerCore
import Locking
import Logging
import Testing

@testable import BrokerDaemon

/// Who may call, decided from the credentials the bus daemon gives (here a lookup the test
/// scripts), without a bus.
@Suite("Caller policy: the caller's user, the programs a clientId is bound to, one lookup per caller")
struct CallerPolicyTests {
    static let ownUser: UInt32 = 1000
    static let mailProgram = "/opt/contoso/bin/mail"

    /// A lookup that answers `credentials` for every caller and counts the questions.
    final class ScriptedBus: Sendable {
        let lookups = Locked(0)
        let answer: Locked<Result<CallerPolicy.Credentials, BrokerFailure>>

        init(_ credentials: CallerPolicy.Credentials) { answer = Locked(.success(credentials)) }

        func policy(bound: [String: Set<String>] = ["mail-app": [CallerPolicyTests.mailProgram]]) -> CallerPolicy {
            CallerPolicy(ownUserId: CallerPolicyTests.ownUser, allowedExecutables: bound, logger: Logger(label: "test"))
            {
                _ in
                self.lookups.withLock { $0 += 1 }
                return try self.answer.withLock { $0 }.get()
            }
        }
    }

    static func caller(user: UInt32 = ownUser, program: String? = mailProgram) -> CallerPolicy.Credentials {
        CallerPolicy.Credentials(userId: user, processId: 42, executable: program)
    }

    /// The failure `body` threw, nil when it returned.
    static func refusal(_ body: () async throws -> Void) async -> BrokerFailure? {
        do {
            try await body()
            return nil
        } catch let failure as BrokerFailure {
            return failure
        } catch {
            Issue.record("not a BrokerFailure: \(error)")
            return nil
        }
    }

    @Test func aCallerOfAnotherUserIsRefusedWhateverItAsksFor() async {
        let bus = ScriptedBus(Self.caller(user: 1001))
        let policy = bus.policy()
        for clientId in ["mail-app", "calendar-app", nil] {
            let refused = await Self.refusal { try await policy.authorize(sender: ":1.7", clientId: clientId) }
            #expect(refused?.code == .accessDenied)
            #expect(refused?.message.contains("user 1000") == true && refused?.message.contains("user 1001") == true)
        }
    }

    @Test func aBoundClientIdServesOnlyItsProgramsAndOthersServeAnyProgram() async {
        let mail = ScriptedBus(Self.caller(program: Self.mailProgram)).policy()
        #expect(await Self.refusal { try await mail.authorize(sender: ":1.1", clientId: "mail-app") } == nil)

        let other = ScriptedBus(Self.caller(program: "/usr/bin/python3")).policy()
        let refused = await Self.refusal { try await other.authorize(sender: ":1.2", clientId: "mail-app") }
        #expect(refused?.code == .accessDenied)
        #expect(refused?.message.contains(Self.mailProgram) == true)
        #expect(refused?.message.contains("/usr/bin/python3") == true)
        #expect(await Self.refusal { try await other.authorize(sender: ":1.2", clientId: "calendar-app") } == nil)
        #expect(await Self.refusal { try await other.authorize(sender: ":1.2", clientId: nil) } == nil)

        // A caller whose program the broker could not read is not the bound program.
        let unknown = ScriptedBus(Self.caller(program: nil)).policy()
        let unknownRefused = await Self.refusal { try await unknown.authorize(sender: ":1.3", clientId: "mail-app") }
        #expect(unknownRefused?.message.contains("an unknown program") == true)
    }

    @Test func aCallersFirstCallsShareOneLookupAndItsLaterOnesNeedNone() async {
        let bus = ScriptedBus(Self.caller())
        let policy = bus.policy()
        #expect(policy.authorizeKnownCaller(sender: ":1.4", clientId: "mail-app") == nil)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    _ = await Self.refusal { try await policy.authorize(sender: ":1.4", clientId: "mail-app") }
                }
            }
        }
        #expect(bus.lookups.withLock { $0 } == 1)
        #expect(policy.authorizeKnownCaller(sender: ":1.4", clientId: "mail-app") != nil)

        // Gone from the bus: a new connection with that name would be someone else.
        policy.forget(":1.4")
        #expect(policy.authorizeKnownCaller(sender: ":1.4", clientId: "mail-app") == nil)
        _ = await Self.refusal { try await policy.authorize(sender: ":1.4", clientId: "mail-app") }
        #expect(bus.lookups.withLock { $0 } == 2)
    }

    @Test func aFailedLookupRefusesThisCallAndIsAskedAgainOnTheNext() async {
        let bus = ScriptedBus(Self.caller())
        bus.answer.withLock { $0 = .failure(BrokerFailure(.accessDenied, "the bus did not say")) }
        let policy = bus.policy()
        let refused = await Self.refusal { try await policy.authorize(sender: ":1.5", clientId: nil) }
        #expect(refused?.code == .accessDenied)

        bus.answer.withLock { $0 = .success(Self.caller()) }
        #expect(await Self.refusal { try await policy.authorize(sender: ":1.5", clientId: nil) } == nil)
        #expect(bus.lookups.withLock { $0 } == 2)
    }
}
