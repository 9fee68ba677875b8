import DBus
import Foundation
import TestSupport
import Testing

/// Where tokens rest between runs (`--token-storage`): the Secret Service by default, refusal to
/// start without one, and the two explicit opt-outs, `memory` and `plaintext-file`.
///
/// Serialized: six environments torn down at once add to the bursts of concurrent process
/// teardown under which Foundation's `readabilityHandler` (used by `ChildProcess`) can crash the
/// test process on Linux (swift-corelibs-foundation#5507).
@Suite("Token storage: Secret Service, memory, plaintext file", .serialized, .timeLimit(.minutes(3)))
struct TokenStorageTests {
    static let application = "io.shareddevice.Broker1"

    @Test(
        "secret-service: the refresh token lives in the keyring, survives a restart, never reaches state.json, and leaves with sign-out; access tokens stay in memory"
    )
    func secretService() async throws {
        let (env, keyring) = try await Self.brokerOnKeyring()
        defer { withExtendedLifetime(keyring) {} }  // the daemon stops when it goes
        // Standard error is read on its own: the readiness line on standard output may come first.
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("tokens are stored in the Secret Service")
        }

        let signedIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signedIn.status == 0, "\(signedIn.stderr)")
        let result = try signedIn.json()
        let accessToken = try #require(result["accessToken"] as? String)
        let idToken = try #require(result["idToken"] as? String)
        let identifier = try #require((result["account"] as? [String: Any])?["identifier"] as? String)

        // The keyring holds one item for this broker: mail-app's refresh token and the account it belongs to.
        let items = try await keyring.items([("application", Self.application)])
        #expect(items.count == 1)
        let item = try #require(items.first)
        let stored = try await keyring.secretJSON(of: item)
        let mail = try #require((stored["clients"] as? [String: Any])?["mail-app"] as? [String: Any])
        #expect(mail["account"] as? String == identifier)
        let refreshToken = try #require(mail["refreshToken"] as? String)
        #expect(!refreshToken.isEmpty)
        // Access tokens are kept in memory only, in the keyring as in the file. The ID token is
        // there once, as Native SSO's subject beside its device secret (single sign-on survives a restart).
        var secret = try await keyring.rawSecret(of: item)
        #expect(!secret.contains(accessToken) && !secret.contains("accessTokens"), "\(secret.count) bytes")
        let sso = try #require((stored["singleSignOn"] as? [String: Any])?[identifier] as? [String: Any])
        #expect(sso["idToken"] as? String == idToken && (sso["deviceSecret"] as? String)?.isEmpty == false)
        #expect(
            secret.components(separatedBy: idToken).count == 2, "the ID token is in the keyring item more than once")

        // state.json knows who is signed in, but holds no token.
        var state = try Self.stateFile(env)
        #expect(state.contains(TestUsers.alice.username))
        for token in [accessToken, idToken, refreshToken] {
            #expect(!state.contains(token), "a token is in state.json")
        }

        // After a restart the first silent call refreshes with the refresh token from the keyring,
        // and the rotated one goes back there; the new access token is cached for this run only.
        let refreshes = try await env.tokenRequests("refresh_token")
        try env.restartBroker(extraArguments: ["--token-storage", "secret-service"])
        let silent = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
        #expect(silent.status == 0, "\(silent.stderr)")
        let newAccessToken = try #require(try silent.json()["accessToken"] as? String)
        #expect(newAccessToken != accessToken)
        #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
        secret = try await keyring.rawSecret(of: item)
        #expect(
            !secret.contains(newAccessToken) && !secret.contains(refreshToken),
            "the rotated refresh token replaced the old one")
        let cached = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
        #expect(try cached.json()["accessToken"] as? String == newAccessToken)
        #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
        state = try Self.stateFile(env)
        #expect(!state.contains(newAccessToken) && !state.contains(refreshToken))
        // Single sign-on after the restart: the device secret came back from the keyring.
        let other = try env.brokerctl(["token", "--client-id", "calendar-app", "--scope", "User.Read"])
        #expect(other.status == 0, "\(other.stderr)")
        #expect(try await env.exchanges("native-sso") == 1)

        // Sign-out takes the tokens out of the keyring.
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        #expect(try await keyring.items([("application", Self.application)]).isEmpty)
        state = try Self.stateFile(env)
        for token in [accessToken, newAccessToken, idToken, refreshToken] { #expect(!state.contains(token)) }
    }

    @Test("secret-service: a keyring locked while brokerd runs fails the next save with StorageFailed naming the fix")
    func lockedKeyring() async throws {
        let (env, keyring) = try await Self.brokerOnKeyring()
        defer { withExtendedLifetime(keyring) {} }  // the daemon stops when it goes
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)

        try await keyring.lockDefault()
        let refused = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("io.shareddevice.Broker1.Error.StorageFailed"), "\(refused.stderr)")
        #expect(refused.stderr.contains("the login keyring is locked; unlock it"), "\(refused.stderr)")
        #expect(
            refused.stderr.contains("--token-storage memory")
                && refused.stderr.contains("--token-storage plaintext-file"))
    }

    @Test(
        "secret-service: keyring and state file out of step (a crash between the two writes) never pair an account with another's tokens"
    )
    func accountMismatchIsNotAdopted() async throws {
        let (env, keyring) = try await Self.brokerOnKeyring()
        defer { withExtendedLifetime(keyring) {} }  // the daemon stops when it goes
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let aliceState = try JSONSerialization.data(withJSONObject: try StateOnDisk.json(in: env.stateDirectory) ?? [:])
        #expect(try env.brokerctl(["sign-out", "--client-id", "mail-app"]).status == 0)
        let bob = try env.signIn(TestUsers.bob, client: "mail-app")
        let bobsToken = try #require(try bob.json()["accessToken"] as? String)

        // The keyring holds bob's tokens; the state file goes back to naming alice.
        _ = try env.brokerd.stop()
        try aliceState.write(to: URL(fileURLWithPath: env.stateDirectory + "/state.json"))
        chmod(env.stateDirectory + "/state.json", 0o600)
        try env.restartBroker(extraArguments: ["--token-storage", "secret-service"])
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("stored tokens belong to an account this app is not signed in with")
        }
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(TestUsers.alice.username))
        let silent = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
        #expect(silent.status != 0 && !silent.stdout.contains(bobsToken))
        #expect(silent.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(silent.stderr)")
    }

    @Test(
        "secret-service: a state file from a plaintext-file run has its refresh tokens moved into the keyring at start")
    func movesPlaintextTokensIntoTheKeyring() async throws {
        // plaintext-file, the fixture's default.
        let env = try BrokerEnvironment(busConfig: TestKeyring.busWithoutActivation)
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let refreshToken = try #require(try Self.refreshToken(in: env, client: "mail-app"))

        let keyring = try await TestKeyring.start(on: env.bus, in: env.directory)
        defer { withExtendedLifetime(keyring) {} }  // the daemon stops when it goes
        try env.restartBroker(extraArguments: ["--token-storage", "secret-service"])
        #expect(!(try Self.stateFile(env)).contains(refreshToken))
        let item = try #require(try await keyring.items([("application", Self.application)]).first)
        #expect(try await keyring.rawSecret(of: item).contains(refreshToken))
        // The silent call refreshes with the refresh token that moved.
        let refreshes = try await env.tokenRequests("refresh_token")
        let silent = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--json"])
        #expect(silent.status == 0, "\(silent.stderr)")
        #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
    }

    @Test("default storage without a Secret Service on the bus: brokerd refuses to start and names both alternatives")
    func refusesWithoutSecretService() throws {
        let directory = try TemporaryDirectory()
        let bus = try PrivateBus(configFile: try directory.write("bus.conf", TestKeyring.busWithoutActivation))
        let stateDirectory = directory.path + "/state"
        let brokerd = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", bus.address, "--authority", "http://127.0.0.1:9/tenant/v2.0", "--state-dir",
                stateDirectory,
            ])
        #expect(try brokerd.waitForExit(timeout: .seconds(20)) == 1)
        let stderr = brokerd.stderrText
        #expect(
            stderr.contains("no Secret Service (org.freedesktop.secrets) is running on the session bus"), "\(stderr)")
        #expect(
            stderr.contains("--token-storage memory") && stderr.contains("--token-storage plaintext-file"), "\(stderr)")
        #expect(!brokerd.stdoutText.contains("brokerd ready"))
        #expect(!FileManager.default.fileExists(atPath: stateDirectory + "/state.json"))
    }

    /// The administrator's file sets the storage and wins over the flag, so the advice names the
    /// file's key: passing the flag it would otherwise suggest changes nothing.
    @Test("secret-service set by the administrator's file: the refusal says to change tokenStorage in that file")
    func refusalNamesTheAdministratorsFile() throws {
        let directory = try TemporaryDirectory()
        let bus = try PrivateBus(configFile: try directory.write("bus.conf", TestKeyring.busWithoutActivation))
        let admin = try directory.write("admin.conf", #"{"tokenStorage": "secret-service"}"#)
        let brokerd = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", bus.address, "--state-dir", directory.path + "/state", "--admin-config", admin,
                "--token-storage", "memory",
            ])
        #expect(try brokerd.waitForExit(timeout: .seconds(20)) == 1)
        let stderr = brokerd.stderrText
        #expect(stderr.contains("(tokenStorage \"secret-service\" in \(admin))"), "\(stderr)")
        #expect(stderr.contains("or change tokenStorage in \(admin) to \"memory\""), "\(stderr)")
        #expect(!stderr.contains("start brokerd with --token-storage"), "\(stderr)")
    }

    @Test(
        "memory: a warning at start, no token in state.json; after a restart still signed in, and silent tokens need interaction"
    )
    func memory() async throws {
        let env = try BrokerEnvironment(brokerArguments: ["--token-storage", "memory"])
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("warning") && $0.contains("tokens are kept in memory only")
        }
        let signedIn = try env.signIn(TestUsers.alice, client: "mail-app")
        let result = try signedIn.json()
        let tokens = [result["accessToken"], result["idToken"]].compactMap { $0 as? String }
        #expect(tokens.count == 2)
        let state = try Self.stateFile(env)
        #expect(state.contains(TestUsers.alice.username))
        for token in tokens { #expect(!state.contains(token), "a token is in state.json") }
        #expect(!state.contains("refreshToken"))
        // This run still has them.
        #expect(try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"]).status == 0)

        // A change that reaches no kept part (here a refresh: new refresh and access tokens, both
        // in memory) does not rewrite state.json: the file is the same one, untouched.
        let path = env.stateDirectory + "/state.json"
        let before = try FileManager.default.attributesOfItem(atPath: path)
        let bytesBefore = StateOnDisk.bytes(in: env.stateDirectory)
        let refreshes = try await env.tokenRequests("refresh_token")
        #expect(
            try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read", "--force-refresh"]).status
                == 0)
        #expect(try await env.tokenRequests("refresh_token") == refreshes + 1)
        let after = try FileManager.default.attributesOfItem(atPath: path)
        #expect(after[.systemFileNumber] as? Int == before[.systemFileNumber] as? Int, "state.json was replaced")
        #expect(after[.modificationDate] as? Date == before[.modificationDate] as? Date, "state.json was written")
        #expect(StateOnDisk.bytes(in: env.stateDirectory) == bytesBefore, "a line was added to the journal")

        try env.restartBroker(extraArguments: ["--token-storage", "memory"])
        let current = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        #expect(current.stdout.contains(TestUsers.alice.username), "\(current.stdout)")
        let silent = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(silent.status != 0)
        #expect(silent.stderr.contains("io.shareddevice.Broker1.Error.InteractionRequired"), "\(silent.stderr)")
    }

    @Test(
        "plaintext-file: a warning at start, and the refresh tokens in state.json; access and ID tokens in memory only")
    func plaintextFile() throws {
        let env = try BrokerEnvironment(brokerArguments: ["--token-storage", "plaintext-file"])
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("warning") && $0.contains("tokens are stored in plaintext in the state file")
        }
        let result = try env.signIn(TestUsers.alice, client: "mail-app").json()
        let accessToken = try #require(result["accessToken"] as? String)
        let idToken = try #require(result["idToken"] as? String)
        let refreshToken = try #require(try Self.refreshToken(in: env, client: "mail-app"))
        #expect(!refreshToken.isEmpty)
        let state = try Self.stateFile(env)
        #expect(!state.contains(accessToken))
        // The ID token only as Native SSO's subject, beside its device secret.
        #expect(state.components(separatedBy: idToken).count == 2 && state.contains("\"deviceSecret\""))
    }

    // MARK: Helpers

    /// The text of state.json and of its journal: a token must be in neither.
    static func stateFile(_ env: BrokerEnvironment) throws -> String {
        StateOnDisk.text(in: env.stateDirectory)
    }

    /// The refresh token the state files hold for `client` (`--token-storage plaintext-file`).
    static func refreshToken(in env: BrokerEnvironment, client: String) throws -> String? {
        let object = try StateOnDisk.json(in: env.stateDirectory)
        return ((object?["clients"] as? [String: Any])?[client] as? [String: Any])?["refreshToken"] as? String
    }

    /// A bus that activates nothing, a headless keyring on it, and brokerd keeping its tokens there.
    static func brokerOnKeyring() async throws -> (BrokerEnvironment, TestKeyring) {
        let env = try BrokerEnvironment(busConfig: TestKeyring.busWithoutActivation)
        let keyring = try await TestKeyring.start(on: env.bus, in: env.directory)
        try env.restartBroker(extraArguments: ["--token-storage", "secret-service"])
        return (env, keyring)
    }

    /// brokerd on the environment's bus and state, not waited for (it may refuse to start).
    static func startBrokerd(_ env: BrokerEnvironment, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", env.bus.address, "--authority", env.idp.authority, "--state-dir", env.stateDirectory,
            ] + arguments, environment: ["BROWSER": env.browser.command])
    }
}

/// gnome-keyring-daemon, headless, serving the Secret Service on a private bus, its keyrings in
/// a temporary home; the login keyring is created and unlocked with a password on its stdin.
/// The test is cancelled (with the reason) when it is not installed or does not start.
final class TestKeyring: @unchecked Sendable {
    static let executable = "/usr/bin/gnome-keyring-daemon"
    static let password = "keyring-Passw0rd"
    static let service = "org.freedesktop.secrets"

    /// A session bus that can activate nothing: the system-wide org.freedesktop.secrets.service
    /// would otherwise start a gnome-keyring on the developer's own keyrings.
    static let busWithoutActivation = PrivateBus.configuration()

    let process: ChildProcess
    let connection: DBusConnection

    private init(process: ChildProcess, connection: DBusConnection) {
        self.process = process
        self.connection = connection
    }

    deinit {
        connection.close()
        process.kill()
    }

    /// `loginKeyring` off: a Secret Service with no keyring at all (a user who never had one).
    static func start(on bus: PrivateBus, in directory: TemporaryDirectory, loginKeyring: Bool = true) async throws
        -> TestKeyring
    {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            try Test.cancel("\(executable) is not installed (the Debian package gnome-keyring; make deps installs it)")
        }
        let home = directory.path + "/keyring-home"
        for sub in ["", "/data", "/config", "/cache", "/run"] {
            try FileManager.default.createDirectory(
                atPath: home + sub, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        let connection = try DBusConnection(address: bus.address)
        // Subscribed before the daemon starts, so neither its name nor its first keyring can be missed.
        let owners = try await connection.signals(
            matching: DBusMatchRule(
                sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameOwnerChanged", arg0: service))
        let process = try ChildProcess(
            "gnome-keyring-daemon", executable: executable,
            arguments: (loginKeyring ? ["--unlock"] : []) + ["--components=secrets", "--foreground"],
            environment: [
                "HOME": home, "XDG_DATA_HOME": home + "/data", "XDG_CONFIG_HOME": home + "/config",
                "XDG_CACHE_HOME": home + "/cache", "XDG_RUNTIME_DIR": home + "/run",
                "DBUS_SESSION_BUS_ADDRESS": bus.address,
            ], stdin: loginKeyring ? password : nil)
        let keyring = TestKeyring(process: process, connection: connection)
        do {
            try await keyring.waitUntilServing(owners, timeout: .seconds(20), withDefault: loginKeyring)
        } catch {
            try Test.cancel("gnome-keyring-daemon did not start: \(error); output:\n\(process.allOutput)")
        }
        return keyring
    }

    /// Until the service's name is owned and its default collection (the login keyring) exists.
    private func waitUntilServing(_ owners: AsyncStream<DBusSignal>, timeout: Duration, withDefault: Bool) async throws
    {
        let connection = self.connection
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                let owned =
                    try await connection.call(
                        destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                        interface: "org.freedesktop.DBus", member: "NameHasOwner",
                        arguments: [.string(Self.service)]
                    ).first?.bool ?? false
                if !owned {
                    for await change in owners
                    where change.arguments.count == 3 && change.arguments[2].string?.isEmpty == false {
                        break
                    }
                }
                try Task.checkCancellation()
            }
            group.addTask {
                try await Task.sleep(for: timeout)  // a bound on the wait, not a synchronization
                throw ProcessFailure("org.freedesktop.secrets was not owned within \(timeout)")
            }
            try await group.next()
            group.cancelAll()
        }
        guard withDefault else { return }
        let alias = try await serviceCall("ReadAlias", [.string("default")]).first?.objectPath
        guard let alias, alias != "/" else { throw ProcessFailure("gnome-keyring-daemon has no default keyring") }
    }

    /// Makes a keyring with the password and makes it the default, as a person does in their
    /// keyring app, through gnome-keyring's own interface (the standard one needs a prompt).
    func createDefault() async throws {
        let opened = try await serviceCall("OpenSession", [.string("plain"), .variant(.string(""))])
        let session = try #require(opened.last?.objectPath)
        let master: DBusValue = .structure([
            .objectPath(session), .array(elementSignature: "y", []),
            .array(elementSignature: "y", Array(Self.password.utf8).map { .byte($0) }), .string("text/plain"),
        ])
        let created = try await connection.call(
            destination: Self.service, path: "/org/freedesktop/secrets",
            interface: "org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface", member: "CreateWithMasterPassword",
            arguments: [.vardict(["org.freedesktop.Secret.Collection.Label": .string("Login")]), master],
            timeout: .seconds(10))
        let collection = try #require(created.first?.objectPath)
        _ = try await serviceCall("SetAlias", [.string("default"), .objectPath(collection)])
    }

    private func serviceCall(_ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
        try await connection.call(
            destination: Self.service, path: "/org/freedesktop/secrets",
            interface: "org.freedesktop.Secret.Service", member: member, arguments: arguments,
            timeout: .seconds(10))
    }

    /// Every item (unlocked or locked) with these attributes, in any collection.
    func items(_ attributes: [(String, String)]) async throws -> [String] {
        let reply = try await serviceCall("SearchItems", [.stringDict(Dictionary(uniqueKeysWithValues: attributes))])
        return reply.flatMap { $0.arrayElements ?? [] }.compactMap(\.objectPath)
    }

    /// An item's secret, read in a plain session.
    func secret(of item: String) async throws -> [UInt8] {
        let opened = try await serviceCall("OpenSession", [.string("plain"), .variant(.string(""))])
        let session = try #require(opened.last?.objectPath)
        let reply = try await connection.call(
            destination: Self.service, path: item, interface: "org.freedesktop.Secret.Item",
            member: "GetSecret", arguments: [.objectPath(session)], timeout: .seconds(10))
        let fields = try #require(reply.first?.structureFields)
        return (fields.count == 4 ? fields[2].arrayElements ?? [] : []).compactMap(\.byte)
    }

    func secretJSON(of item: String) async throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(try await secret(of: item)))
        return try #require(object as? [String: Any])
    }

    /// The secret as text.
    func rawSecret(of item: String) async throws -> String {
        String(decoding: try await secret(of: item), as: UTF8.self)
    }

    /// Locks the default collection (no prompt needed to lock).
    func lockDefault() async throws {
        let alias = try #require(try await serviceCall("ReadAlias", [.string("default")]).first?.objectPath)
        _ = try await serviceCall("Lock", [.array(elementSignature: "o", [.objectPath(alias)])])
    }

    /// Unlocks the default collection with its password, as a person would at the prompt, through
    /// gnome-keyring's own interface for that (the standard Unlock needs a prompt).
    func unlockDefault() async throws {
        let alias = try #require(try await serviceCall("ReadAlias", [.string("default")]).first?.objectPath)
        let opened = try await serviceCall("OpenSession", [.string("plain"), .variant(.string(""))])
        let session = try #require(opened.last?.objectPath)
        let master: DBusValue = .structure([
            .objectPath(session), .array(elementSignature: "y", []),
            .array(elementSignature: "y", Array(Self.password.utf8).map { .byte($0) }), .string("text/plain"),
        ])
        _ = try await connection.call(
            destination: Self.service, path: "/org/freedesktop/secrets",
            interface: "org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface", member: "UnlockWithMasterPassword",
            arguments: [.objectPath(alias), master], timeout: .seconds(10))
    }
}
