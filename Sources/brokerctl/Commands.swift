import ArgumentParser
import Glibc
import SharedDeviceClient

struct DeviceInfo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device-info", abstract: "Show the device mode and what the broker knows of the device.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await reportingErrors {
            // The device is not an app's: any clientId will do, it is not sent.
            let info = try await common.application(clientId: "brokerctl").deviceInformation()
            if common.json { return Output.json(info) }
            var rows = [("Device mode", info.deviceMode.rawValue), ("Broker version", info.brokerVersion),
                        ("Device id", info.deviceId), ("Tenant", info.tenantId.isEmpty ? "(not set)" : info.tenantId),
                        ("Authority", info.authority)]
            rows += info.extraDeviceInformation.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            Output.fields(rows)
        }
    }
}

struct CurrentAccount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "current-account",
        abstract: "Show who is signed in, and who this app saw signed in on its previous call.",
        discussion: "Like MSAL's getCurrentAccount: after a sign-out elsewhere, the app's next call shows current none and previous the user, once.")
    @OptionGroup var client: ClientOptions
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await reportingErrors {
            let (current, previous) = try await common.application(clientId: client.clientId).currentAccount()
            if common.json { return Output.json(CurrentAccountOutput(current: current, previous: previous)) }
            Output.fields([("Current account", Output.account(current)), ("Previous account", Output.account(previous))])
            if current == nil, let previous {
                print("Account \(previous.username) has been signed out.")
            }
        }
    }
}

struct SignIn: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-in", abstract: "Sign a user in for an app.",
        discussion: """
            The password is read from standard input, never from the command line:
              echo "$PASSWORD" | brokerctl sign-in --client-id mail-app --username alice@contoso.example --password-stdin
            In shared mode, signing in as someone else while an account is signed in fails with AccountAlreadySignedIn.
            """)
    @OptionGroup var client: ClientOptions
    @Option(help: "The user's sign-in name.") var username: String
    @Flag(help: "Read the password from the first line of standard input.") var passwordStdin = false
    @Option(name: .customLong("scope"), help: "A scope to ask for; repeat for more (openid profile offline_access are always added).")
    var scopes: [String] = []
    @OptionGroup var common: CommonOptions

    func validate() throws {
        if !passwordStdin { throw ValidationError("give the password on standard input with --password-stdin") }
    }

    func run() async throws {
        guard let password = readLine(strippingNewline: true), !password.isEmpty else {
            Output.error("no password on standard input")
            throw ExitCode(1)
        }
        try await reportingErrors {
            let result = try await common.application(clientId: client.clientId)
                .signIn(username: username, password: password, scopes: scopes)
            if common.json { return Output.json(result) }
            Output.fields([("Signed in", Output.account(result.account)), ("Scopes", result.scopes.joined(separator: " ")),
                           ("Token expires", Output.expiry(result.expiresOn))])
        }
    }
}

struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Get an access token for the signed-in account without interaction, and print it.",
        discussion: "From the broker's cache while it has more than 5 minutes left, else with the refresh token. Fails with InteractionRequired when neither works.")
    @OptionGroup var client: ClientOptions
    @Option(name: .customLong("scope"), help: "A scope to ask for; repeat for more.") var scopes: [String] = []
    @Flag(help: "Skip the cache and use the refresh token.") var forceRefresh = false
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await reportingErrors {
            let result = try await common.application(clientId: client.clientId)
                .acquireTokenSilent(SilentTokenParameters(scopes: scopes, forceRefresh: forceRefresh))
            if common.json { return Output.json(result) }
            Output.fields([("Account", Output.account(result.account)), ("Scopes", result.scopes.joined(separator: " ")),
                           ("Expires", Output.expiry(result.expiresOn)), ("Access token", result.accessToken)])
        }
    }
}

struct Accounts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the accounts an app can use.")
    @OptionGroup var client: ClientOptions
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await reportingErrors {
            let accounts = try await common.application(clientId: client.clientId).accounts()
            if common.json { return Output.json(accounts) }
            if accounts.isEmpty { print("No accounts.") }
            for account in accounts { print(Output.account(account)) }
        }
    }
}

struct SignOut: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-out", abstract: "Sign out. In shared mode this signs the whole device out.")
    @OptionGroup var client: ClientOptions
    @Flag(name: .customLong("from-browser"), help: "Also end the identity provider's browser session.")
    var fromBrowser = false
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await reportingErrors {
            try await common.application(clientId: client.clientId)
                .signOut(account: nil, parameters: SignoutParameters(signoutFromBrowser: fromBrowser))
            if common.json { return Output.json(["signedOut": true]) }
            print("Signed out.")
        }
    }
}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print each change of the device's account as it happens, until interrupted.",
        discussion: "Prints \"watching\" (text) once subscribed; with --json, one JSON object per line.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await reportingErrors {
            let app = try common.application(clientId: "brokerctl")
            let changes = try await app.subscribeToAccountChanges()
            if !common.json { print("watching for account changes (Ctrl-C to stop)") }
            Output.flush()
            for try await change in changes {
                if common.json {
                    Output.jsonLine(WatchLine(reason: change.reason.rawValue, current: change.current, previous: change.previous))
                } else {
                    print("\(change.reason.rawValue): current \(Output.account(change.current)), previous \(Output.account(change.previous))")
                }
                Output.flush()
            }
        }
    }
}

struct WatchLine: Encodable {
    var reason: String
    var current: Account?
    var previous: Account?
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(reason, forKey: .reason)
        try container.encode(current, forKey: .current)
        try container.encode(previous, forKey: .previous)
    }
    enum CodingKeys: String, CodingKey { case reason, current, previous }
}
