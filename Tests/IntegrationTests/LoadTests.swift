import BrokerAPI
import DBus
import Foundation
import Locking
import SharedDeviceClient
import TestSupport
import Testing

/// The broker under load: many clients calling, many subscribers listening, sign-ins and
/// sign-outs going on. Figures are printed; the assertions are about correctness, not speed.
@Suite("Load: 200 clients, 1,000 subscribers, 30 s")
struct LoadTests {
    static let clients = 200
    static let subscribers = 1000
    static let duration: Duration = .seconds(30)

    @Test(
        "200 clients call for 30 s while the device signs in and out; 1,000 subscribers get every AccountChanged once, in order"
    )
    func mixedLoad() async throws {
        let env = try BrokerEnvironment(brokerArguments: ["--log-level", "warning"])
        let brokerPID = env.brokerd.process.pid
        let rssBefore = try Self.residentKiB(of: brokerPID)

        // Subscribers: plain D-Bus connections with an AccountChanged match, each keeping what it hears.
        let heard = (0..<Self.subscribers).map { _ in Locked<[String]>([]) }
        var subscriberConnections: [DBusConnection] = []
        var listeners: [Task<Void, Never>] = []
        let rule = DBusMatchRule(
            sender: BrokerNames.busName, path: BrokerNames.objectPath,
            interface: BrokerNames.interface, member: Broker1Signal.accountChanged.rawValue)
        for index in 0..<Self.subscribers {
            let connection = try DBusConnection(address: env.bus.address)
            let stream = try await connection.signals(matching: rule, bufferLimit: 4096)
            subscriberConnections.append(connection)
            let log = heard[index]
            listeners.append(
                Task {
                    for await signal in stream {
                        let reason = signal.arguments.count == 3 ? signal.arguments[2].string ?? "?" : "?"
                        let who = signal.arguments.first?.vardict?[AccountKey.username]?.string ?? "-"
                        log.withLock { $0.append("\(reason):\(who)") }
                    }
                })
        }
        defer {
            for listener in listeners { listener.cancel() }
            for connection in subscriberConnections { connection.close() }
        }

        // Clients: each its own application object (its own connection), calling at about 10 calls/s.
        let configuration = BrokerClientConfiguration(busAddress: env.bus.address)
        let apps = try (0..<Self.clients).map { index in
            try PublicClientApplication(
                clientId: TestUsers.clients[index % TestUsers.clients.count], configuration: configuration)
        }
        let calls = Locked<[String: Int]>([:])
        let stop = Locked(false)
        let clientTasks = apps.enumerated().map { index, app in
            Task {
                var round = index
                while !stop.withLock({ $0 }) {
                    round += 1
                    let outcome = await Self.mixedCall(app, round: round)
                    calls.withLock { $0[outcome, default: 0] += 1 }
                    try? await Task.sleep(for: .milliseconds(80 + (round * 7) % 40))
                }
            }
        }

        // The driver: sign in, sign out, again and again, from one app, for the whole duration.
        let driver = try PublicClientApplication(clientId: "notes-app", configuration: configuration)
        var expected: [String] = []
        let clock = ContinuousClock()
        let deadline = clock.now + Self.duration
        while clock.now < deadline {
            _ = try await driver.signIn(
                username: TestUsers.alice.username, password: TestUsers.alice.password, scopes: ["User.Read"])
            expected.append("signed-in:\(TestUsers.alice.username)")
            try await driver.signOut(account: nil)
            expected.append("signed-out:-")
        }
        stop.withLock { $0 = true }
        for task in clientTasks { await task.value }
        let rssUnderLoad = try Self.residentKiB(of: brokerPID)

        // Every subscriber hears the whole sequence (bounded wait for the last signals to arrive).
        let settle = clock.now + .seconds(20)
        while clock.now < settle, heard.contains(where: { $0.withLock { $0.count } < expected.count }) {
            try await Task.sleep(for: .milliseconds(50))
        }
        let complete = heard.filter { $0.withLock { $0 == expected } }.count
        #expect(
            complete == Self.subscribers,
            "\(Self.subscribers - complete) subscribers missed, repeated or reordered a change")

        // Only the failures the contract promises: nobody signed in (NoAccount), or not this app's sign-in.
        let tally = calls.withLock { $0 }
        let allowed: Set<String> = [
            "ok", BrokerErrorCode.noAccount.rawValue, BrokerErrorCode.interactionRequired.rawValue,
        ]
        let unexpected = tally.filter { !allowed.contains($0.key) }
        #expect(unexpected.isEmpty, "calls failed outside the contract: \(unexpected)")

        // Memory goes back to its level once the clients are gone.
        let rssAfter = try await Self.settledResidentKiB(of: brokerPID, clock: clock)
        #expect(
            rssAfter <= rssBefore * 2 + 16 * 1024,
            "brokerd grew from \(rssBefore) KiB to \(rssAfter) KiB after the load")
        let total = tally.values.reduce(0, +)
        print(
            """
            load: \(Self.clients) clients made \(total) calls in \(Self.duration) (\(tally.sorted { $0.key < $1.key })); \
            \(expected.count) account changes, heard in full and in order by \(complete) of \(Self.subscribers) subscribers; \
            brokerd RSS \(rssBefore) KiB before, \(rssUnderLoad) KiB under load, \(rssAfter) KiB after
            """)
    }

    /// One call of a client's mix; "ok" or the error's name.
    private static func mixedCall(_ app: PublicClientApplication, round: Int) async -> String {
        do throws(BrokerError) {
            switch round % 4 {
            case 0: _ = try await app.currentAccount()
            case 1: _ = try await app.deviceInformation()
            case 2: _ = try await app.accounts()
            default: _ = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"]))
            }
            return "ok"
        } catch {
            return error.code?.rawValue ?? error.errorName
        }
    }

    /// VmRSS of a process, in KiB.
    static func residentKiB(of pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { throw ProcessFailure("no VmRSS for \(pid)") }
        return kib
    }

    /// RSS once it stops falling (the allocator returns freed memory lazily), at most 5 s.
    static func settledResidentKiB(of pid: Int32, clock: ContinuousClock) async throws -> Int {
        var last = try residentKiB(of: pid)
        let until = clock.now + .seconds(5)
        while clock.now < until {
            try await Task.sleep(for: .milliseconds(500))
            let now = try residentKiB(of: pid)
            if now >= last { return now }
            last = now
        }
        return last
    }
}
