import BrokerAPI
import Foundation
import HTTP
import SharedDeviceClient
import TestSupport
import Testing

/// The client library (`SharedDeviceClient`) over a real bus, against the real brokerd and idp-sim.
@Suite("Client library: PublicClientApplication against brokerd", .serialized)
struct ClientLibraryTests {
    private func application(_ env: BrokerEnvironment, _ clientId: String = "mail-app") throws
        -> PublicClientApplication
    {
        try PublicClientApplication(
            clientId: clientId, configuration: BrokerClientConfiguration(busAddress: env.bus.address))
    }

    private func expectError(
        _ expected: BrokerErrorCode, _ body: () async throws -> Void,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        do {
            try await body()
            Issue.record("expected \(expected.rawValue), got success", sourceLocation: sourceLocation)
        } catch {
            #expect((error as? BrokerError)?.code == expected, "\(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("every call: device information, current account, sign-in, accounts, silent token, sign-out")
    func eachCall() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)

        let device = try await app.deviceInformation()
        #expect(device.deviceMode == .shared)
        #expect(device.authority == env.idp.authority)

        let before = try await app.currentAccount()
        #expect(before.current == nil && before.previous == nil)

        let result = try await app.signIn(
            username: TestUsers.alice.username, password: TestUsers.alice.password, scopes: ["User.Read"])
        #expect(result.account.username == TestUsers.alice.username)
        #expect(result.authorizationHeader == "Bearer \(result.accessToken)")

        let seen = try await app.currentAccount()
        #expect(seen.current?.username == TestUsers.alice.username)
        #expect(try await app.accounts().map(\.username) == [TestUsers.alice.username])

        let silent = try await app.acquireTokenSilent(
            SilentTokenParameters(scopes: ["User.Read"], account: seen.current))
        #expect(silent.accessToken == result.accessToken)
        let refreshed = try await app.acquireTokenSilent(
            SilentTokenParameters(scopes: ["User.Read"], forceRefresh: true))
        #expect(refreshed.account == result.account)

        // The token works at the resource, as the tutorial's Graph call uses it.
        let me = try await HTTPClient.shared.send(
            .get(
                env.idp.baseURL + "/v1.0/me",
                headers: [HTTPHeader("Authorization", silent.authorizationHeader)]))
        #expect(me.status == 200)

        try await app.signOut(account: seen.current, parameters: SignoutParameters(signoutFromBrowser: true))
        let after = try await app.currentAccount()
        #expect(after.current == nil)
        #expect(after.previous?.username == TestUsers.alice.username)
    }

    @Test("each broker error maps to its case")
    func errorsMap() async throws {
        let env = try BrokerEnvironment()
        let mail = try application(env)
        let calendar = try application(env, "calendar-app")

        await expectError(.noAccount) { try await mail.signOut(account: nil) }
        await expectError(.invalidPassword) {
            _ = try await mail.signIn(
                username: TestUsers.alice.username, password: "wrong-Passw0rd!", scopes: ["User.Read"])
        }
        await expectError(.userNotFound) {
            _ = try await mail.signIn(
                username: "nobody@contoso.example", password: "whatever-Passw0rd!", scopes: ["User.Read"])
        }
        _ = try await mail.signIn(
            username: TestUsers.alice.username, password: TestUsers.alice.password, scopes: ["User.Read"])
        await expectError(.accountAlreadySignedIn) {
            _ = try await calendar.signIn(
                username: TestUsers.bob.username, password: TestUsers.bob.password, scopes: ["User.Read"])
        }
        // Calendar never signed in, and gets a token of its own all the same (single sign-on).
        let calendarToken = try await calendar.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"]))
        #expect(calendarToken.account.username == TestUsers.alice.username)
        #expect(try JWT.claims(calendarToken.accessToken)["azp"] as? String == "calendar-app")

        // No broker on the bus.
        #expect(try env.brokerd.stop() == 0)
        do {
            _ = try await mail.currentAccount()
            Issue.record("expected brokerUnavailable")
        } catch {
            #expect(error.isBrokerUnavailable, "\(error)")
            #expect(error.errorName == "org.freedesktop.DBus.Error.ServiceUnknown")
        }

        // No bus at all: said as such, with the address and the reason, and not as ServiceUnknown.
        let noBus = "unix:path=\(env.directory.path)/no-such-bus"
        do {
            _ = try PublicClientApplication(
                clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: noBus))
            Issue.record("expected brokerUnavailable")
        } catch {
            #expect(error.isBrokerUnavailable, "\(error)")
            #expect(error.errorName == "org.freedesktop.DBus.Error.NoServer", "\(error)")
            #expect(error.message.hasPrefix("could not connect to the bus at \(noBus): "), "\(error)")
        }
    }

    @Test("OneShotQueries answers as PublicClientApplication does, and says at once when no broker is there")
    func oneShotQueries() async throws {
        let env = try BrokerEnvironment()
        let configuration = BrokerClientConfiguration(busAddress: env.bus.address)
        let queries = OneShotQueries(clientId: "mail-app", configuration: configuration)
        let app = try application(env)

        #expect(try queries.deviceInformation() == (try await app.deviceInformation()))
        #expect(try queries.currentAccount() == (nil, nil))
        #expect(try queries.accounts().isEmpty)

        _ = try await app.signIn(
            username: TestUsers.alice.username, password: TestUsers.alice.password, scopes: ["User.Read"])
        let seen = try queries.currentAccount()
        #expect(seen.current?.username == TestUsers.alice.username)
        #expect(try queries.accounts() == [try #require(seen.current)])
        // GetCurrentAccount moved mail-app's previous account, whichever path asked.
        #expect(try await app.currentAccount().previous == seen.current)

        // A broker error keeps its case.
        try await app.signOut(account: nil)
        #expect(try queries.currentAccount().previous?.username == TestUsers.alice.username)

        // No broker on the bus: brokerUnavailable from the bus at once, not after the query timeout.
        #expect(try env.brokerd.stop() == 0)
        let clock = ContinuousClock()
        let start = clock.now
        #expect {
            _ = try queries.deviceInformation()
        } throws: { error in
            let error = error as? BrokerError
            return error?.isBrokerUnavailable == true && error?.errorName == "org.freedesktop.DBus.Error.ServiceUnknown"
        }
        #expect(clock.now - start < .seconds(2))

        // No bus at all, or none configured.
        #expect {
            _ = try OneShotQueries(
                clientId: "mail-app",
                configuration: BrokerClientConfiguration(
                    busAddress: "unix:path=\(env.directory.path)/no-such-bus")
            ).deviceInformation()
        } throws: { error in
            let error = error as? BrokerError
            return error?.message.hasPrefix("could not connect to the bus at unix:path=") == true
                && error?.errorName == "org.freedesktop.DBus.Error.NoServer" && error?.isBrokerUnavailable == true
        }
    }

    @Test("accountChanges hears a sign-in and a sign-out made by another process")
    func changesFromAnotherProcess() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)
        let recorder = ChangeRecorder()
        let consumer = recorder.record(try await app.subscribeToAccountChanges())
        defer { consumer.cancel() }

        #expect(try env.signIn(TestUsers.alice, client: "notes-app").status == 0)
        let signedIn = await recorder.next { $0.reason == .signedIn }
        #expect(signedIn?.current?.username == TestUsers.alice.username)
        #expect(signedIn?.previous == nil)

        #expect(try env.brokerctl(["sign-out", "--client-id", "calendar-app"]).status == 0)
        let signedOut = await recorder.next { $0.reason == .signedOut }
        #expect(signedOut?.current == nil)
        #expect(signedOut?.previous?.username == TestUsers.alice.username)
        #expect(await recorder.changes.count == 2)
    }

    @Test("accountChanges survives a broker restart and reports the state once")
    func changesSurviveRestart() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)
        let recorder = ChangeRecorder()
        let consumer = recorder.record(try await app.subscribeToAccountChanges())
        defer { consumer.cancel() }

        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(await recorder.next { $0.reason == .signedIn } != nil)

        try env.restartBroker()
        let restarted = await recorder.next { $0.reason == .brokerRestarted }
        #expect(restarted?.current?.username == TestUsers.alice.username)
        #expect(restarted?.previous?.username == TestUsers.alice.username)

        // Still subscribed: the new broker's signal arrives.
        #expect(try env.brokerctl(["sign-out", "--client-id", "notes-app"]).status == 0)
        let signedOut = await recorder.next { $0.reason == .signedOut }
        #expect(signedOut?.previous?.username == TestUsers.alice.username)
        #expect(await recorder.changes.filter { $0.reason == .brokerRestarted }.count == 1)
    }

    @Test("cancelling the consumer ends accountChanges")
    func cancellationEnds() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)
        let recorder = ChangeRecorder()
        let consumer = recorder.record(app.accountChanges)
        consumer.cancel()
        #expect(await recorder.waitUntilEnded(timeout: .seconds(5)))
        // The application object still works afterwards.
        #expect(try await app.deviceInformation().deviceMode == .shared)
    }

    @Test("the bus going away ends signOutWarnings: a window following it learns no warning will come")
    func warningsEndWithTheBus() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)
        let warnings = try await app.signOutWarnings()
        env.bus.stop()
        let ended = await within(.seconds(10)) {
            for await _ in warnings {}
            return true
        }
        #expect(ended == true, "signOutWarnings went on after the bus was gone")
    }

    @Test(
        "email one-time code: a wrong code keeps the flow, resend replaces the code, the right one signs in, cancel ends a flow"
    )
    func emailCodeFlow() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)
        let state = try await app.signIn(username: TestUsers.carol.username, scopes: ["User.Read"])
        #expect(state.channel == "email")
        #expect(state.codeLength == 8)
        #expect(state.sentTo.contains("*") && state.sentTo != TestUsers.carol.username)

        let first = try #require(try await env.latestCode(for: TestUsers.carol.username))
        await expectError(.invalidCode) { _ = try await state.submitCode(Self.wrongCode(than: first)) }
        try await state.resendCode()
        let second = try #require(try await env.latestCode(for: TestUsers.carol.username))
        #expect(second != first)
        await expectError(.invalidCode) { _ = try await state.submitCode(first) }  // the resend replaced it
        let result = try await state.submitCode(second)
        #expect(result.account.username == TestUsers.carol.username)
        #expect(try await app.currentAccount().current?.username == TestUsers.carol.username)

        // A second flow, cancelled, is gone.
        try await app.signOut(account: nil)
        let other = try await app.signIn(username: TestUsers.carol.username, scopes: ["User.Read"])
        await other.cancel()
        await expectError(.flowNotFound) { _ = try await other.submitCode(second) }
    }

    @Test("interactive sign-in: cancelling the task cancels the flow in the broker")
    func interactiveCancellation() async throws {
        let env = try BrokerEnvironment()
        let app = try application(env)
        let attempt = Task { () async -> Result<TokenResult, BrokerError> in
            do {
                return .success(
                    try await app.acquireToken(
                        InteractiveTokenParameters(
                            scopes: ["User.Read"], promptType: .login, loginHint: TestUsers.alice.username)))
            } catch let error as BrokerError {
                return .failure(error)
            } catch {
                return .failure(.dbus(name: "unexpected", message: "\(error)"))
            }
        }
        // The browser was opened: the flow is waiting in the broker. Nobody finishes it; the app gives up.
        _ = try await env.browser.nextURL()
        attempt.cancel()
        switch await attempt.value {
        case .success: Issue.record("the interactive sign-in succeeded without anyone signing in")
        case .failure(let error): #expect(error.isCancelled, "\(error)")
        }
        #expect(try await app.currentAccount().current == nil)
    }

    /// A code of the same length that is not `code`.
    static func wrongCode(than code: String) -> String {
        String(code.map { $0 == "0" ? "1" : "0" })
    }
}
