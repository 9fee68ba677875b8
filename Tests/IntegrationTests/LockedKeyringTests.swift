import DBus
import Foundation
import TestSupport
import Testing

/// A kiosk with automatic login: the keyring that holds the tokens is locked when brokerd starts.
/// brokerd serves accounts anyway, refuses token calls with `StorageLocked`, and serves tokens the
/// moment the keyring is unlocked, without a restart; over a private bus with a headless
/// gnome-keyring, the real brokerd, brokerctl and idp-sim.
@Suite("A keyring locked at start: accounts at once, tokens once unlocked", .serialized, .timeLimit(.minutes(3)))
struct LockedKeyringTests {
    /// alice signed in through mail-app with her tokens in the keyring; then brokerd restarted
    /// with the keyring locked.
    static func restartedLocked() async throws -> (BrokerEnvironment, TestKeyring) {
        let (env, keyring) = try await TokenStorageTests.brokerOnKeyring()
        let signedIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        try await keyring.lockDefault()
        try env.restartBroker(extraArguments: ["--token-storage", "secret-service"])
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("the keyring is locked")
        }
        return (env, keyring)
    }

    @Test("accounts and device mode answered while locked, token calls StorageLocked, tokens served once unlocked")
    func servesTokensOnceUnlocked() async throws {
        let (env, keyring) = try await Self.restartedLocked()
        defer { withExtendedLifetime(keyring) {} }

        let current = try env.brokerctl(["current-account", "--client-id", "calendar-app", "--json"])
        #expect(current.status == 0, "\(current.stderr)")
        #expect((try current.json()["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        #expect(try env.brokerctl(["device-info", "--json"]).json()["deviceMode"] as? String == "shared")

        let token = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(token.status == 1)
        #expect(token.stderr.contains("io.shareddevice.Broker1.Error.StorageLocked"), "\(token.stderr)")
        #expect(token.stderr.contains("the login keyring is locked; unlock it"), "\(token.stderr)")
        let signIn = try env.signIn(TestUsers.alice, client: "calendar-app")
        #expect(signIn.status == 1)
        #expect(signIn.stderr.contains("io.shareddevice.Broker1.Error.StorageLocked"), "\(signIn.stderr)")
        let refreshesBefore = try await env.tokenRequests("refresh_token")

        try await keyring.unlockDefault()
        try env.brokerd.process.waitForLine(timeout: .seconds(15), stderr: true) {
            $0.contains("tokens are served again")
        }
        let served = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
        #expect(served.status == 0, "\(served.stderr)")
        // From the refresh token the keyring kept: the same brokerd, no new sign-in.
        #expect(try await env.tokenRequests("refresh_token") == refreshesBefore + 1)
        #expect(try env.signIn(TestUsers.alice, client: "calendar-app").status == 0)
    }

    @Test("a sign-out while locked signs the device out at once; the keyring's tokens are revoked once unlocked")
    func signOutWhileLocked() async throws {
        let (env, keyring) = try await Self.restartedLocked()
        defer { withExtendedLifetime(keyring) {} }
        let revokedBefore = try await env.idpStats()["revoke"] as? Int ?? 0

        let signOut = try env.brokerctl(["sign-out", "--client-id", "calendar-app", "--json"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
        let result = try signOut.json()
        #expect(result["tokensRevoked"] as? Bool == false)
        #expect((result["notes"] as? [String] ?? []).contains { $0.contains("the keyring is locked") }, "\(result)")
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"]).json()["current"] is NSNull)

        try await keyring.unlockDefault()
        try env.brokerd.process.waitForLine(timeout: .seconds(15), stderr: true) {
            $0.contains("tokens are served again")
        }
        // mail-app's refresh token (and nothing of alice's stays in the keyring afterwards).
        #expect(try await env.idpStats()["revoke"] as? Int ?? 0 == revokedBefore + 1)
        #expect(try await keyring.items([("application", TokenStorageTests.application)]).isEmpty)
        let token = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(token.stderr.contains("io.shareddevice.Broker1.Error.NoAccount"), "\(token.stderr)")
    }

    @Test("no keyring at all: everything but tokens is served, and a keyring made the default is used at once")
    func noKeyringAtAll() async throws {
        let env = try BrokerEnvironment(busConfig: TestKeyring.busWithoutActivation)
        let keyring = try await TestKeyring.start(on: env.bus, in: env.directory, loginKeyring: false)
        defer { withExtendedLifetime(keyring) {} }
        try env.restartBroker(extraArguments: ["--token-storage", "secret-service"])
        #expect(try env.brokerctl(["device-info", "--json"]).json()["deviceMode"] as? String == "shared")
        let refused = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.StorageLocked"), "\(refused.stderr)")
        #expect(
            refused.stderr.contains("no default keyring") && refused.stderr.contains("Set as Default"),
            "\(refused.stderr)")

        try await keyring.createDefault()
        // A new default announces nothing itself: its first lock and unlock (a login) do.
        try await keyring.lockDefault()
        try await keyring.unlockDefault()
        try env.brokerd.process.waitForLine(timeout: .seconds(45), stderr: true) {
            $0.contains("tokens are served again")
        }
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(!(try await keyring.items([("application", TokenStorageTests.application)])).isEmpty)
    }
}
