import ArgumentParser
import Glibc
import GraphProfile
import SharedDeviceClient

struct DeviceInfo: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device-info", abstract: "Show the device mode and what the broker knows of the device.")
    @OptionGroup var common: CommonOptions

    func run() throws {
        try exitOnFailure(PlainReads.deviceInformation(address: common.address, json: common.json))
    }
}

struct SignInOptionsCommand: AsyncCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-in-options", abstract: "Show which sign-in flows work with the device's identity provider.",
        discussion:
            "The flows an app can offer (password, email-code, browser) and how other apps then get tokens of their "
            + "own. Reads the provider's discovery document when the broker has not yet."
    )
    @OptionGroup var client: ClientOptions
    @OptionGroup var common: CommonOptions

    func runAsync() async throws {
        try await reportingErrors {
            let options = try await common.application(clientId: client.clientId).signInOptions()
            if common.json { return Output.json(options) }
            Output.fields([
                (
                    "Sign-in flows",
                    options.flows.isEmpty ? "none" : Output.list(options.flows.map(\.rawValue))
                ),
                ("Single sign-on", PlainReads.describe(options.singleSignOn)),
            ])
        }
    }
}

struct CurrentAccount: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "current-account",
        abstract: "Show who is signed in, and who this app saw signed in on its previous call.",
        discussion:
            "Like MSAL's getCurrentAccount: after a sign-out elsewhere, the app's next call shows current none and "
            + "previous the user, once."
    )
    @OptionGroup var client: ClientOptions
    @OptionGroup var common: CommonOptions

    func run() throws {
        try exitOnFailure(
            PlainReads.currentAccount(clientId: client.clientId, address: common.address, json: common.json))
    }
}

struct SignIn: AsyncCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-in",
        abstract:
            "Sign a user in for an app: with an emailed code, a password, in the browser, on another device, or on "
            + "their phone.",
        discussion: """
            With --username alone, the provider emails a one-time code and brokerctl asks for it \
            (type "resend" for a new code). Scripts give codes on standard input with --code-stdin, \
            one per line; a wrong code reads the next line.
              brokerctl sign-in --client-id mail-app --username bob@contoso.example
            The password is read from standard input, never from the command line:
              echo "$PASSWORD" | brokerctl sign-in --client-id mail-app \\
                  --username alice@contoso.example --password-stdin
            --interactive opens the provider's sign-in page in the system browser (desktop \
            portal, else $BROWSER or xdg-open):
              brokerctl sign-in --client-id mail-app --interactive --prompt login
            --device-code, for a device without a browser: brokerctl prints an address and a code (and a \
            QR code when qrencode is installed); sign in there on any device, and brokerctl waits:
              brokerctl sign-in --client-id mail-app --device-code
            --approve-on-phone, where the provider offers it (OpenID Connect CIBA): the provider asks \
            the user on their own phone; brokerctl shows a short code the phone shows too, and waits:
              brokerctl sign-in --client-id mail-app --username alice@contoso.example --approve-on-phone
            In shared mode, signing in as someone else while an account is signed in fails with AccountAlreadySignedIn.
            """,
        aliases: ["signin"])
    @OptionGroup var client: ClientOptions
    @Option(help: "The user's sign-in name (with --interactive, a hint the sign-in page fills in).") var username:
        String?
    @Flag(help: "Read the password from the first line of standard input.") var passwordStdin = false
    @Flag(help: "Read the emailed code from standard input, one attempt per line, without prompting.") var codeStdin =
        false
    @Flag(help: "Sign in in the system browser (authorization code with PKCE and a loopback redirect).")
    var interactive = false
    @Flag(help: "Sign in on another device with a code (the device authorization grant, RFC 8628).")
    var deviceCode = false
    @Flag(help: "Have the provider ask --username to approve on their phone (OpenID Connect CIBA).")
    var approveOnPhone = false
    @Option(
        help: ArgumentHelp(
            "With --interactive: "
                + "\(InteractiveTokenParameters.PromptType.allCases.map(\.rawValue).joined(separator: ", ")).")
    )
    var prompt: InteractiveTokenParameters.PromptType = .selectAccount
    @Option(
        name: .customLong("scope"),
        help: "A scope to ask for; repeat for more (openid profile offline_access are always added).")
    var scopes: [String] = []
    @OptionGroup var common: CommonOptions

    func validate() throws {
        if approveOnPhone {
            if deviceCode || interactive || passwordStdin || codeStdin || prompt != .selectAccount {
                throw ValidationError(
                    "--approve-on-phone asks the user on their phone; it takes only --username (and --scope)")
            }
            guard username != nil else { throw ValidationError("--approve-on-phone needs --username: whose phone") }
            return
        }
        if deviceCode {
            if interactive || passwordStdin || codeStdin || username != nil {
                throw ValidationError(
                    "--device-code signs in on another device; it takes no --interactive, --username or stdin")
            }
            return
        }
        if interactive {
            if passwordStdin || codeStdin {
                throw ValidationError(
                    "--interactive signs in in the browser; it takes neither --password-stdin nor --code-stdin")
            }
            return
        }
        if prompt != .selectAccount { throw ValidationError("--prompt goes with --interactive") }
        guard username != nil else {
            throw ValidationError(
                "give --username (an emailed code, or a password with --password-stdin), --interactive (in the "
                    + "browser) or --device-code (on another device)")
        }
        if passwordStdin && codeStdin {
            throw ValidationError("give either --password-stdin or --code-stdin, not both")
        }
    }

    func runAsync() async throws {
        let app = try common.application(clientId: client.clientId)
        try await reportingErrors {
            let result: TokenResult
            if let username, approveOnPhone {
                result = try await signInWithPhoneApproval(
                    app.signInWithPhoneApproval(username: username, scopes: scopes), username: username)
            } else if deviceCode {
                result = try await signInWithDeviceCode(app.signInWithDeviceCode(scopes: scopes))
            } else if interactive {
                result = try await app.acquireToken(
                    InteractiveTokenParameters(
                        scopes: scopes, promptType: prompt, loginHint: username,
                        progress: { progress in
                            switch progress.stage {
                            case .browserOpened:
                                let url = Output.shown(progress.url ?? "the sign-in page")
                                Output.note("Continue in your browser: \(url)")
                            case .browserUnavailable:
                                let reason = Output.shown(progress.reason ?? "no reason given")
                                let url = Output.shown(progress.url ?? "(the broker gave no address)")
                                Output.note(
                                    "No browser could be opened (\(reason)).\n"
                                        + "Open this page in a browser on this device to go on: \(url)")
                            case .exchanging: Output.note("Signed in in the browser; getting the tokens ...")
                            case .waiting, .codeReceived: break
                            }
                        }))
            } else if let username, passwordStdin {
                guard let password = readLine(strippingNewline: true), !password.isEmpty else {
                    Output.error("no password on standard input")
                    throw ExitCode(1)
                }
                result = try await app.signIn(username: username, password: password, scopes: scopes)
            } else if let username {
                do {
                    result = try await signInWithCode(app.signIn(username: username, scopes: scopes))
                } catch BrokerError.interactionRequired(let message) {
                    // The emailed code is the default, so the person may not know the other ways in.
                    Output.brokerError(.interactionRequired(message))
                    Output.note(
                        "To sign in another way: --password-stdin (a password), --device-code (on another device), "
                            + "or --interactive (in the browser).")
                    throw ExitCode(1)
                }
            } else {
                throw ValidationError("give --username")
            }
            if common.json { return Output.json(result) }
            Output.fields([
                ("Signed in", Output.account(result.account)), ("Scopes", Output.list(result.scopes, separator: " ")),
                ("Token expires", Output.expiry(result.expiresOn)),
            ])
        }
    }

    /// Shows where to sign in, and waits for it, counting down on a terminal.
    private func signInWithDeviceCode(_ signIn: DeviceCodeSignIn) async throws -> TokenResult {
        Output.note(
            "To sign in, open \(Output.shown(signIn.verificationUri)) and enter the code "
                + Output.shown(signIn.userCode))
        if let complete = signIn.verificationUriComplete {
            Output.note("or open \(Output.shown(complete))")
            Output.qrCode(complete)
        }
        return try await Self.waiting(until: signIn.expiresOn, for: "the sign-in") { try await signIn.result() }
    }

    /// Shows the binding message, and waits for the approval, counting down on a terminal.
    private func signInWithPhoneApproval(_ signIn: PhoneApprovalSignIn, username: String) async throws
        -> TokenResult
    {
        Output.note(
            "\(Output.shown(username)) was asked to approve this sign-in on their phone. Approve it only if the "
                + "phone shows \(Output.shown(signIn.bindingMessage))")
        return try await Self.waiting(until: signIn.expiresOn, for: "the approval") { try await signIn.result() }
    }

    /// Waits for `result`, with a countdown to `expiry` on a terminal.
    private static func waiting(
        until expiry: UnixTime, for what: String, _ result: () async throws -> TokenResult
    ) async throws -> TokenResult {
        let countdown = Task {
            guard isatty(STDERR_FILENO) != 0 else { return }
            while !Task.isCancelled {
                let left = max(0, expiry.seconds - UnixTime.now.seconds)
                let seconds = left % 60
                Output.prompt("\rWaiting for \(what): \(left / 60):\(seconds < 10 ? "0" : "")\(seconds) left ")
                try? await Task.sleep(for: .seconds(1))
            }
        }
        defer {
            countdown.cancel()
            if isatty(STDERR_FILENO) != 0 { Output.prompt("\n") }
        }
        return try await result()
    }

    /// Reads codes until one is right, the input ends, or the flow fails for good.
    private func signInWithCode(_ state: SignInCodeRequiredState) async throws -> TokenResult {
        if !codeStdin || !common.json {
            Output.note(
                "\(Self.article(state.codeLength)) \(state.codeLength)-digit code was sent by "
                    + "\(Output.shown(state.channel)) to \(Output.shown(state.sentTo)).")
        }
        while true {
            if !codeStdin { Output.prompt("Code (or \"resend\"): ") }
            guard let line = readLine(strippingNewline: true) else {
                await state.cancel()
                Output.error("no code on standard input; the sign-in was cancelled")
                throw ExitCode(1)
            }
            let code = String(line.filter { !$0.isWhitespace })
            if code == "resend" {
                try await state.resendCode()
                Output.note("A new code was sent to \(Output.shown(state.sentTo)).")
                continue
            }
            // A wrong code leaves the flow open: ask again. Anything else ends it.
            switch await Self.submit(code, to: state) {
            case .success(let result): return result
            case .failure(let error) where error.code == .invalidCode: Output.brokerError(error)
            case .failure(let error): throw error
            }
        }
    }
}

extension SignIn {
    /// "an 8-digit code", "an 11-digit code", "an 18-digit code", "a 6-digit code": as the number is said.
    static func article(_ number: Int) -> String {
        var leading = number
        while leading >= 1000 { leading /= 1000 }
        let spokenWithAVowel = [8, 11, 18].contains(leading) || (80...89).contains(leading) || leading >= 800
        return spokenWithAVowel && leading < 900 ? "An" : "A"
    }

    static func submit(_ code: String, to state: SignInCodeRequiredState) async -> Result<TokenResult, BrokerError> {
        do { return .success(try await state.submitCode(code)) } catch { return .failure(error) }
    }
}

struct Me: AsyncCommand {
    static let configuration = CommandConfiguration(
        commandName: "me",
        abstract:
            "Call the Graph-like profile API (GET /v1.0/me) with a silently acquired token and print the profile.",
        discussion: """
            The tutorial's "Call Graph". The token is asked for with the User.Read scope; the API is \
            Microsoft Graph for Microsoft authorities and the authority's own host otherwise (idp-sim \
            serves /v1.0/me there). Fails with InteractionRequired when nobody is signed in.
            """)
    @OptionGroup var client: ClientOptions
    @Option(name: .customLong("graph"), help: "The API's base URL (default: from the broker's authority).")
    var graphBase: String?
    @OptionGroup var common: CommonOptions

    func runAsync() async throws {
        let app = try common.application(clientId: client.clientId)
        try await reportingErrors {
            let token = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"]))
            var base = graphBase
            if base == nil { base = GraphProfile.baseURL(forAuthority: try await app.deviceInformation().authority) }
            guard let base else {
                Output.error("the broker's authority gives no API URL; give --graph")
                throw ExitCode(1)
            }
            let profile: GraphProfile
            do {
                profile = try await GraphProfile.me(baseURL: base, authorizationHeader: token.authorizationHeader)
            } catch let error as GraphProfileError {
                Output.error(error.description)
                throw ExitCode(1)
            }
            if common.json { return Output.json(profile) }
            Output.fields([
                ("Display name", profile.displayName ?? ""), ("User principal name", profile.userPrincipalName ?? ""),
                ("Mail", profile.mail ?? ""), ("Id", profile.id ?? ""),
            ])
        }
    }
}

struct Token: AsyncCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Get an access token for the signed-in account without interaction, and print it.",
        discussion:
            "From the broker's cache while it has more than 5 minutes left, else with the refresh token. Fails with "
            + "InteractionRequired when neither works."
    )
    @OptionGroup var client: ClientOptions
    @Option(name: .customLong("scope"), help: "A scope to ask for; repeat for more.") var scopes: [String] = []
    @Flag(help: "Skip the cache and use the refresh token.") var forceRefresh = false
    @Option(
        help: ArgumentHelp(
            "A resource's claims challenge (its WWW-Authenticate claims value, or the JSON): skip the cache and "
                + "send it with the refresh.", valueName: "claims")) var claims: String?
    @OptionGroup var common: CommonOptions

    func runAsync() async throws {
        try await reportingErrors {
            let result = try await common.application(clientId: client.clientId)
                .acquireTokenSilent(SilentTokenParameters(scopes: scopes, forceRefresh: forceRefresh, claims: claims))
            if common.json { return Output.json(result) }
            Output.fields([
                ("Account", Output.account(result.account)), ("Scopes", Output.list(result.scopes, separator: " ")),
                ("Expires", Output.expiry(result.expiresOn)), ("Access token", result.accessToken),
            ])
        }
    }
}

struct Accounts: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accounts", abstract: "List the accounts an app can use.")
    @OptionGroup var client: ClientOptions
    @OptionGroup var common: CommonOptions

    func run() throws {
        try exitOnFailure(PlainReads.accounts(clientId: client.clientId, address: common.address, json: common.json))
    }
}

struct SignOut: AsyncCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-out", abstract: "Sign out. In shared mode this signs the whole device out.",
        aliases: ["signout"])
    @OptionGroup var client: ClientOptions
    @Flag(name: .customLong("from-browser"), help: "Also end the identity provider's browser session.")
    var fromBrowser = false
    @OptionGroup var common: CommonOptions

    func runAsync() async throws {
        try await reportingErrors {
            let result = try await common.application(clientId: client.clientId)
                .signOut(account: nil, parameters: SignoutParameters(signoutFromBrowser: fromBrowser))
            if common.json { return Output.json(SignOutOutput(signedOut: true, result: result)) }
            print("Signed out.")
            if result.browserLogoutOpened {
                print(
                    "The provider's sign-out page was opened in the browser; "
                        + "whether it ended the session is not known.")
            }
            for note in result.notes { Output.note("Note: \(Output.shown(note)).") }
            for path in result.notCleanedUp { Output.note("Not cleared: \(Output.shown(path))") }
            if result.notCleanedUpCount > result.notCleanedUp.count {
                Output.note("Not cleared: \(result.notCleanedUpCount - result.notCleanedUp.count) more (brokerd's log)")
            }
        }
    }
}

struct Watch: AsyncCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract:
            "Print each change of the device's account, and each warning of a sign-out nobody asked for (after "
            + "inactivity), as it happens, until interrupted.",
        discussion:
            "Prints \"watching\" (text) once subscribed; with --json, one JSON object per line. When the broker "
            + "leaves the bus (it stopped, or is restarting) watch says so and goes on watching: its return shows "
            + "as a broker-restarted change with the account then.")
    @OptionGroup var common: CommonOptions

    func runAsync() async throws {
        try await reportingErrors {
            let app = try common.application(clientId: "brokerctl")
            let changes = try await app.subscribeToAccountChanges()
            let warnings = try await app.signOutWarnings()
            let presence = try await app.brokerPresence()
            if !common.json { print("watching for account changes (Ctrl-C to stop)") }
            Output.flush()
            let json = common.json
            // The broker leaving (a stop, a crash, a restart; a sign-in in progress ends with it):
            // said at once, and watching goes on; its return shows as a broker-restarted change.
            let presenceTold = Task {
                for await event in presence where event == .left {
                    if json {
                        Output.jsonLine(BrokerEventLine(event: "broker-left"))
                    } else {
                        print("the broker left the bus (stopped or restarting); watching for its return")
                    }
                    Output.flush()
                }
            }
            defer { presenceTold.cancel() }
            // The warnings of a sign-out nobody asked for, between the changes: one line each.
            let warned = Task {
                for await warning in warnings {
                    if json {
                        Output.jsonLine(WarningLine(warning))
                    } else {
                        print(Self.describe(warning))
                    }
                    Output.flush()
                }
            }
            defer { warned.cancel() }
            for try await change in changes {
                if common.json {
                    Output.jsonLine(
                        WatchLine(
                            reason: change.reason.rawValue, current: change.current, previous: change.previous,
                            cause: change.cause?.rawValue))
                } else {
                    print(
                        "\(change.reason.rawValue)\(change.cause.map { " (\($0.rawValue))" } ?? ""): current "
                            + "\(Output.account(change.current)), previous \(Output.account(change.previous))"
                    )
                }
                Output.flush()
            }
        }
    }
}

extension Watch {
    /// `sign-out pending (idle): in 60 s` or `sign-out cancelled (idle)`.
    static func describe(_ warning: SignOutWarning) -> String {
        switch warning {
        case .pending(let reason, let deadline):
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            let left =
                (Int64(clamping: deadline) - Int64(now.tv_sec) * 1_000_000 - Int64(now.tv_nsec / 1000)) / 1_000_000
            return "sign-out pending (\(reason.rawValue)): in \(max(0, left)) s, unless the person is active"
        case .cancelled(let reason):
            return "sign-out cancelled (\(reason.rawValue))"
        }
    }
}

extension InteractiveTokenParameters.PromptType: ExpressibleByArgument {}
