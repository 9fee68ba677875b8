import BrokerAPI
import DBus
import Foundation
import HTTP
import SharedDeviceClient
import TestSupport
import Testing

/// Approval on a phone (OpenID Connect CIBA, poll mode): `brokerctl sign-in --approve-on-phone`
/// names the person, the provider asks them on their phone (here idp-sim's simulated phone,
/// driven over HTTP as the phone's app would), the phone and brokerctl show the same binding
/// message, and the broker, polling at the pace the provider asks, signs the device in.
///
/// The waits here last seconds, so each runs off Swift's small thread pool (`offThePool`).
@Suite("Approval on a phone (CIBA)", .serialized)
struct PhoneApprovalTests {
    static let grant = "urn:openid:params:grant-type:ciba"

    /// idp-sim's simulated phone of one user.
    struct Phone {
        let env: BrokerEnvironment
        let username: String

        /// The requests waiting on this phone: their phone-side id and what the phone shows.
        func requests() async throws -> [(id: String, bindingMessage: String, clientId: String)] {
            let query = username.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? username
            let response = try await HTTPClient.shared.send(
                .get("\(env.idp.baseURL)/phone/requests?username=\(query)"))
            #expect(response.status == 200, "\(String(decoding: response.body, as: UTF8.self))")
            let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
            return (object?["requests"] as? [[String: Any]] ?? []).map {
                (
                    $0["id"] as? String ?? "", $0["binding_message"] as? String ?? "",
                    $0["client_id"] as? String ?? ""
                )
            }
        }

        func answer(_ id: String, _ action: String) async throws -> Int {
            try await HTTPClient.shared.send(
                .postForm("\(env.idp.baseURL)/phone/requests/\(id)", fields: [("action", action)])
            ).status
        }
    }

    /// Starts brokerctl's approval for `username` and returns it with the binding message it showed.
    static func start(_ env: BrokerEnvironment, _ username: String, client: String = "mail-app") throws
        -> (ChildProcess, bindingMessage: String)
    {
        let ctl = try env.startBrokerctl([
            "sign-in", "--client-id", client, "--username", username, "--approve-on-phone", "--json",
            "--scope", "User.Read",
        ])
        let line = try ctl.waitForLine(timeout: .seconds(15), stderr: true) { $0.contains("Approve it only if") }
        let message = try #require(line.split(separator: " ").last.map(String.init))
        return (ctl, message)
    }

    @Test(
        "approved on alice's phone, which shows the code brokerctl shows: the device is alice's; the request is redeemed once"
    )
    func approved() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        let options = try await offThePool {
            try env.brokerctl(["sign-in-options", "--client-id", "mail-app", "--json"])
        }
        #expect(options.stdout.contains("\"ciba\""), "\(options.stdout)")
        let (ctl, shown) = try await offThePool { try Self.start(env, TestUsers.alice.username) }
        let phone = Phone(env: env, username: TestUsers.alice.username)
        let waiting = try await phone.requests()
        #expect(waiting.count == 1)
        #expect(waiting.first?.bindingMessage == shown, "the phone shows what the kiosk shows")
        #expect(waiting.first?.clientId == "mail-app")
        // Nothing is asked of bob's phone.
        #expect(try await Phone(env: env, username: TestUsers.bob.username).requests().isEmpty)
        #expect(try await phone.answer(try #require(waiting.first?.id), "approve") == 200)
        #expect(try await offThePool { try ctl.waitForExit(timeout: .seconds(20)) } == 0, "\(ctl.stderrText)")
        let result = try JSONSerialization.jsonObject(with: Data(ctl.stdoutText.utf8)) as? [String: Any]
        #expect((result?["account"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        let current = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"])
        }.json()
        #expect((current["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        // Signed in on the first poll after the approval: the broker stopped polling then.
        let polls = try await env.tokenRequests(Self.grant)
        #expect(polls >= 1)
        try await Task.sleep(for: .seconds(2))  // two more poll intervals: none may come
        #expect(try await env.tokenRequests(Self.grant) == polls)
    }

    @Test("denied on the phone: AccessDenied and nobody signed in; nobody answers in time: CodeExpired")
    func deniedOrExpired() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        let (denied, _) = try await offThePool { try Self.start(env, TestUsers.alice.username) }
        let phone = Phone(env: env, username: TestUsers.alice.username)
        #expect(try await phone.answer(try #require(try await phone.requests().first?.id), "deny") == 200)
        #expect(try await offThePool { try denied.waitForExit(timeout: .seconds(20)) } == 1)
        #expect(denied.stderrText.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(denied.stderrText)")
        #expect(
            try await offThePool { try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]) }
                .json()["current"] is NSNull)

        let short = try await offThePool {
            try BrokerEnvironment(idpArguments: ["--ciba-interval", "1", "--ciba-lifetime", "2"])
        }
        let (expired, _) = try await offThePool { try Self.start(short, TestUsers.alice.username) }
        #expect(try await offThePool { try expired.waitForExit(timeout: .seconds(20)) } == 1)
        #expect(expired.stderrText.contains("io.shareddevice.Broker1.Error.CodeExpired"), "\(expired.stderrText)")
        #expect(
            try await offThePool { try short.brokerctl(["current-account", "--client-id", "mail-app", "--json"]) }
                .json()["current"] is NSNull)
    }

    @Test(
        "an unknown user: UserNotFound; a provider without CIBA: not offered, and NotSupported naming what is missing")
    func unknownUserOrNotOffered() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        let unknown = try await offThePool {
            try env.brokerctl([
                "sign-in", "--client-id", "mail-app", "--username", "mallory@contoso.example", "--approve-on-phone",
            ])
        }
        #expect(unknown.status == 1)
        #expect(unknown.stderr.contains("io.shareddevice.Broker1.Error.UserNotFound"), "\(unknown.stderr)")
        #expect(unknown.stderr.contains("mallory@contoso.example"), "\(unknown.stderr)")

        let plain = try await offThePool { try BrokerEnvironment(idpArguments: ["--without", "ciba"]) }
        let options = try await offThePool {
            try plain.brokerctl(["sign-in-options", "--client-id", "mail-app", "--json"])
        }
        #expect(!options.stdout.contains("\"ciba\""), "\(options.stdout)")
        let refused = try await offThePool {
            try plain.brokerctl([
                "sign-in", "--client-id", "mail-app", "--username", TestUsers.alice.username, "--approve-on-phone",
            ])
        }
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.NotSupported"), "\(refused.stderr)")
        #expect(refused.stderr.contains("backchannel_authentication_endpoint"), "\(refused.stderr)")
    }

    /// An app that would put its own words on someone's phone ("IT support: approve this") has no
    /// way to: the binding message is the broker's, and a call carrying one is refused before the
    /// provider is asked. Nor can another connection wait for or cancel the flow.
    @Test(
        "an app's own binding message is refused and nothing reaches the phone; another connection cannot take the flow"
    )
    func hostileApp() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        let (app, other) = try await offThePool {
            (try DBusConnection(address: env.bus.address), try DBusConnection(address: env.bus.address))
        }
        func start(_ options: [String: DBusValue]) async throws -> [DBusValue] {
            try await app.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                member: Broker1Method.startSignIn.rawValue,
                arguments: [
                    .string("mail-app"), .string(TestUsers.alice.username), .strings(["User.Read"]),
                    .vardict(options.mapValues { .variant($0) }),
                ], timeout: .seconds(20))
        }
        await #expect {
            _ = try await start([
                OptionKey.method: .string(SignInFlow.ciba.rawValue),
                "bindingMessage": .string("IT support: approve this"),
            ])
        } throws: { ($0 as? DBusError)?.name == "io.shareddevice.Broker1.Error.InvalidArgument" }
        let phone = Phone(env: env, username: TestUsers.alice.username)
        #expect(try await phone.requests().isEmpty)

        let reply = try await start([OptionKey.method: .string(SignInFlow.ciba.rawValue)])
        let flowId = try #require(reply.first?.string)
        for member in [Broker1Method.finishSignIn, .cancelSignIn] {
            await #expect {
                _ = try await other.call(
                    destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                    member: member.rawValue, arguments: [.string(flowId)], timeout: .seconds(5))
            } throws: { ($0 as? DBusError)?.name == "io.shareddevice.Broker1.Error.FlowNotFound" }
        }
        // The flow is still the app's: it ends when the app leaves the bus, and an approval after
        // that signs nobody in.
        let request = try #require(try await phone.requests().first)
        app.close()
        _ = try await offThePool {
            try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("caller left; its sign-ins were dropped")
            }
        }
        #expect(try await phone.answer(request.id, "approve") == 200)
        try await Task.sleep(for: .seconds(2))  // two poll intervals: a poll still running would sign alice in
        #expect(
            try await offThePool { try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]) }
                .json()["current"] is NSNull)
    }

    /// An app floods alice's phone from many connections, cancelling each request and starting
    /// another: her phone is asked three times, the provider never hears of the rest, and bob's
    /// phone is still asked for bob.
    @Test("a flood of requests to alice's phone from many connections: three reach the provider, then LimitsExceeded")
    func phoneFlood() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        func start(_ username: String) async throws -> (DBusConnection, String) {
            let connection = try await offThePool { try DBusConnection(address: env.bus.address) }
            let reply = try await connection.call(
                destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                member: Broker1Method.startSignIn.rawValue,
                arguments: [
                    .string("mail-app"), .string(username), .strings([]),
                    .vardict([OptionKey.method: .variant(.string(SignInFlow.ciba.rawValue))]),
                ], timeout: .seconds(20))
            return (connection, reply.first?.string ?? "")
        }
        var connections: [DBusConnection] = []
        defer { for connection in connections { connection.close() } }
        var refused: [String] = []
        for _ in 0..<10 {
            do {
                let (connection, flowId) = try await start(TestUsers.alice.username)
                connections.append(connection)
                _ = try await connection.call(
                    destination: BrokerNames.busName, path: BrokerNames.objectPath, interface: BrokerNames.interface,
                    member: Broker1Method.cancelSignIn.rawValue, arguments: [.string(flowId)], timeout: .seconds(5))
            } catch let error as DBusError {
                refused.append(error.name)
            }
        }
        #expect(refused.count == 7)
        #expect(Set(refused) == ["io.shareddevice.Broker1.Error.LimitsExceeded"], "\(refused)")
        #expect((try await env.idpStats())["bc-authorize"] as? Int == 3)
        let (bob, _) = try await start(TestUsers.bob.username)
        connections.append(bob)
        #expect(try await Phone(env: env, username: TestUsers.bob.username).requests().count == 1)
    }

    /// The client library: the person walks away, the app cancels; their later approval on the
    /// phone signs nobody in, and a new request carries a new binding message.
    @Test("the library: cancel() ends the wait with Cancelled, an approval after it signs nobody in")
    func libraryCancel() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        let app = try PublicClientApplication(
            clientId: "mail-app", configuration: BrokerClientConfiguration(busAddress: env.bus.address))
        let signIn = try await app.signInWithPhoneApproval(username: TestUsers.alice.username, scopes: ["User.Read"])
        let phone = Phone(env: env, username: TestUsers.alice.username)
        let request = try #require(try await phone.requests().first)
        #expect(request.bindingMessage == signIn.bindingMessage)
        async let waited: BrokerErrorCode? = {
            do {
                _ = try await signIn.result()
                return nil
            } catch { return (error as? BrokerError)?.code }
        }()
        try await signIn.cancel()
        let code = await waited
        #expect(code == .cancelled || code == .flowNotFound, "\(String(describing: code))")
        #expect(try await phone.answer(request.id, "approve") == 200)
        try await Task.sleep(for: .seconds(2))  // two poll intervals: a poll still running would sign alice in
        #expect(try await app.currentAccount().current == nil)
        let again = try await app.signInWithPhoneApproval(username: TestUsers.alice.username, scopes: [])
        #expect(again.bindingMessage != signIn.bindingMessage || again.flowId != signIn.flowId)
        try await again.cancel()
    }

    /// The kiosk as people use it: alice approves, works, signs out; bob then types his name and
    /// approves on his phone. Alice's phone is never asked for bob's sign-in, and while alice is
    /// signed in nobody's phone is asked for another person's.
    @Test("two people one after the other: each phone asked only for its own person, never while another is signed in")
    func twoPeople() async throws {
        let env = try await offThePool { try BrokerEnvironment(idpArguments: ["--ciba-interval", "1"]) }
        let alicePhone = Phone(env: env, username: TestUsers.alice.username)
        let bobPhone = Phone(env: env, username: TestUsers.bob.username)
        let (alice, _) = try await offThePool { try Self.start(env, TestUsers.alice.username) }
        #expect(try await alicePhone.answer(try #require(try await alicePhone.requests().first?.id), "approve") == 200)
        #expect(try await offThePool { try alice.waitForExit(timeout: .seconds(20)) } == 0, "\(alice.stderrText)")

        let early = try await offThePool {
            try env.brokerctl([
                "sign-in", "--client-id", "notes-app", "--username", TestUsers.bob.username, "--approve-on-phone",
            ])
        }
        #expect(early.status == 1)
        #expect(early.stderr.contains("AccountAlreadySignedIn"), "\(early.stderr)")
        #expect(try await bobPhone.requests().isEmpty, "bob's phone is not asked while alice is signed in")

        #expect(try await offThePool { try env.brokerctl(["sign-out", "--client-id", "notes-app"]) }.status == 0)
        let (bob, shown) = try await offThePool { try Self.start(env, TestUsers.bob.username, client: "notes-app") }
        #expect(try await alicePhone.requests().isEmpty)
        let request = try #require(try await bobPhone.requests().first)
        #expect(request.bindingMessage == shown)
        #expect(try await bobPhone.answer(request.id, "approve") == 200)
        #expect(try await offThePool { try bob.waitForExit(timeout: .seconds(20)) } == 0, "\(bob.stderrText)")
        let current = try await offThePool {
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        }.json()
        #expect((current["current"] as? [String: Any])?["username"] as? String == TestUsers.bob.username)
    }
}
