import BrokerAPI
import DBus
import Foundation
import HTTP
import TestSupport
import Testing

/// The options (`a{sv}`) of every method, over a private bus with the real brokerd and idp-sim: a
/// key the contract does not list for the method is refused as the configuration file refuses
/// one, naming it and the known ones, and changes nothing; every key it lists is obeyed.
@Suite("Option keys: unknown ones refused, known ones accepted", .serialized)
struct OptionKeysTests {
    /// Arguments of `method` a caller could send, with `options` in the options' place; nil for a
    /// method this test does not know, so that one added with options is noticed.
    static func arguments(_ method: Broker1Method, options: [String: DBusValue], username: String) -> [DBusValue]? {
        switch method {
        case .startSignIn: [.string("mail-app"), .string(username), .strings(["User.Read"]), .vardict(options)]
        case .acquireTokenInteractive: [.string("mail-app"), .strings(["User.Read"]), .vardict(options)]
        case .acquireTokenSilent: [.string("mail-app"), .strings(["User.Read"]), .string(""), .vardict(options)]
        case .signOut: [.string("mail-app"), .string(""), .vardict(options)]
        default: nil
        }
    }

    /// A misspelling an app could make of `key`: its case changed.
    static func misspelt(_ key: String) -> String { key.lowercased() != key ? key.lowercased() : key.capitalized }

    static func call(_ connection: DBusConnection, _ method: Broker1Method, _ arguments: [DBusValue]) async -> Result<
        [DBusValue], DBusError
    > {
        do {
            return .success(
                try await connection.call(
                    destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                    member: method.rawValue, arguments: arguments, timeout: .seconds(20)))
        } catch let error as DBusError {
            return .failure(error)
        } catch {
            return .failure(DBusError(name: "test.Unexpected", message: "\(error)"))
        }
    }

    @Test("a misspelt key of each method's options gets InvalidArgument naming it and the known keys; nothing changes")
    func unknownKeyRefused() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let connection = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { connection.close() }
        let before = StateOnDisk.bytes(in: env.stateDirectory)
        var tried = 0
        for method in Broker1Method.allCases where method.optionsArgument != nil {
            let known = method.options.map(\.key)
            let wrong = Self.misspelt(known[0])
            // Beside a known key with a valid value: the whole call is refused, not just the key.
            var options: [String: DBusValue] = [wrong: .bool(true)]
            if let bool = method.options.first(where: { $0.signature == "b" }) { options[bool.key] = .bool(false) }
            guard
                let arguments = Self.arguments(method, options: options, username: TestUsers.alice.username)
            else {
                Issue.record("\(method.rawValue) has options this test does not call it with: add it")
                continue
            }
            tried += 1
            let outcome = await Self.call(connection, method, arguments)
            guard case .failure(let error) = outcome else {
                Issue.record("\(method.rawValue) with option \(wrong) succeeded")
                continue
            }
            #expect(error.name == BrokerErrorCode.invalidArgument.dbusErrorName, "\(method.rawValue): \(error)")
            #expect(error.message.contains("\"\(wrong)\""), "\(method.rawValue): \(error.message)")
            for key in known { #expect(error.message.contains(key), "\(method.rawValue): \(error.message)") }
        }
        #expect(tried == 4)
        // Nothing was written, nobody was signed out, no sign-in started.
        #expect(StateOnDisk.bytes(in: env.stateDirectory) == before)
        let current = await Self.call(connection, .getCurrentAccount, [.string("mail-app")])
        #expect((try? current.get().first?.vardict?[AccountKey.username]?.string) == TestUsers.alice.username)
    }

    @Test("every key the contract lists is accepted and obeyed")
    func knownKeysAccepted() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let connection = try await offThePool { try DBusConnection(address: env.bus.address) }
        defer { connection.close() }
        var obeyed: Set<String> = []

        // StartSignIn with each method (carol has an emailed code), each flow then cancelled, before
        // anyone is signed in.
        for flow in SignInFlow.startedBySignInMethod {
            let started = try await Self.call(
                connection, .startSignIn,
                Self.arguments(
                    .startSignIn, options: [OptionKey.method: .string(flow.rawValue)],
                    username: TestUsers.carol.username) ?? []
            ).get()
            #expect(started.count == 2)
            let channel = [SignInFlow.deviceCode: "device-code", .ciba: "ciba"][flow] ?? "email"
            #expect(started.last?.vardict?[ChallengeKey.channel]?.string == channel)
            _ = try await Self.call(connection, .cancelSignIn, [started.first ?? .string("")]).get()
        }
        obeyed.insert(OptionKey.method)

        // AcquireTokenInteractive with all three, through the test browser.
        let interactive = Task {
            await Self.call(
                connection, .acquireTokenInteractive,
                Self.arguments(
                    .acquireTokenInteractive,
                    options: [
                        OptionKey.prompt: .string("login"), OptionKey.loginHint: .string(TestUsers.alice.username),
                        OptionKey.flowId: .string("option-keys-flow"),
                        OptionKey.claims: .string(#"{"id_token":{"auth_time":{"essential":true}}}"#),
                    ], username: "") ?? [])
        }
        let page = try await env.browser.nextProviderURL()
        #expect(page.contains("login_hint="), "\(page)")
        #expect(page.contains("claims=%7B%22id_token%22"), "\(page)")
        _ = try await env.browser.signIn(
            at: page, username: TestUsers.alice.username, password: TestUsers.alice.password)
        let result = try await interactive.value.get()
        #expect(
            result.first?.vardict?[TokenResultKey.account]?.vardict?[AccountKey.username]?.string
                == TestUsers.alice.username)
        obeyed.formUnion(["prompt", "loginHint", "flowId"])

        // AcquireTokenSilent with forceRefresh: a new token, not the cached one.
        let silent = Self.arguments(.acquireTokenSilent, options: [:], username: "") ?? []
        let cached = try await Self.call(connection, .acquireTokenSilent, silent).get()
        let refreshed = try await Self.call(
            connection, .acquireTokenSilent,
            Self.arguments(.acquireTokenSilent, options: [OptionKey.forceRefresh: .bool(true)], username: "") ?? []
        ).get()
        #expect(
            cached.first?.vardict?[TokenResultKey.accessToken] != refreshed.first?.vardict?[TokenResultKey.accessToken])
        obeyed.insert(OptionKey.forceRefresh)

        // AcquireTokenSilent with claims (a resource's challenge): past the cache, to the provider,
        // which is sent the claims.
        let refreshes = try await env.tokenRequests("refresh_token")
        _ = try await Self.call(
            connection, .acquireTokenSilent,
            Self.arguments(
                .acquireTokenSilent,
                options: [OptionKey.claims: .string(#"{"access_token":{"nbf":{"essential":true,"value":"1"}}}"#)],
                username: "") ?? []
        ).get()
        #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
        let sent = try await HTTPClient.shared.send(.get(env.idp.baseURL + "/test/last-claims?client_id=mail-app"))
        #expect(sent.bodyText.contains("nbf"), "\(sent.bodyText)")
        obeyed.insert(OptionKey.claims)

        // SignOut with signoutFromBrowser.
        let signedOut = try await Self.call(
            connection, .signOut,
            Self.arguments(.signOut, options: [OptionKey.signoutFromBrowser: .bool(true)], username: "") ?? []
        ).get()
        #expect(signedOut.first?.vardict?[SignOutResultKey.cause]?.string == SignOutCause.app.rawValue)
        obeyed.insert(OptionKey.signoutFromBrowser)

        #expect(obeyed == Set(Broker1Method.allCases.flatMap { $0.options.map(\.key) }))
    }
}
