import BrokerAPI
import DBus
import Foundation
import Locking
import SharedDeviceClient
import TestSupport
import Testing

/// `SignInProgress`: the app that started an interactive sign-in learns each stage, the first with
/// the sign-in page's address, and no other connection hears it; over a private bus with the real
/// brokerd and idp-sim, and a test browser that posts the provider's real form.
@Suite("Interactive sign-in progress, to its caller only", .serialized)
struct SignInProgressTests {
    @Test("browser-opened with the page's URL, waiting, code-received, exchanging; another connection hears none")
    func stagesToTheCallerOnly() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        // Another app on the bus, listening for any SignInProgress and for AccountChanged: the
        // broker's signals reach it in the order sent, so AccountChanged comes after any progress.
        let bystander = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { bystander.close() }
        let overheard = try await bystander.signals(
            matching: DBusMatchRule(sender: BrokerNames.busName, interface: BrokerNames.interface))

        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let seen = Locked<[SignInProgress]>([])
        let signIn = Task {
            try await app.acquireToken(
                InteractiveTokenParameters(
                    scopes: ["User.Read"], promptType: .login, loginHint: TestUsers.alice.username,
                    progress: { progress in seen.withLock { $0.append(progress) } }))
        }
        let opened = try await env.browser.nextURL()
        _ = try await env.browser.signIn(
            at: opened, username: TestUsers.alice.username, password: TestUsers.alice.password)
        let result = try await signIn.value
        #expect(result.account.username == TestUsers.alice.username)

        let stages = seen.withLock { $0 }
        #expect(stages.map(\.stage) == [.browserOpened, .waiting, .codeReceived, .exchanging], "\(stages)")
        #expect(stages.first?.url == opened)

        var heard: [String] = []
        for await signal in overheard {
            heard.append(signal.member)
            if signal.member == Broker1Signal.accountChanged.rawValue { break }
        }
        #expect(heard == [Broker1Signal.accountChanged.rawValue], "\(heard)")
    }
}
