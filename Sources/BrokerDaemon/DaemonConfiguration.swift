import BrokerCore
import BrokerPersistence
import FoundationEssentials
import Glibc
import Identity
import JSON

/// brokerd's configuration file (`--config FILE`, JSON). Every field is optional; command-line
/// flags win over it.
///
/// ```json
/// {
///   "deviceMode": "shared",
///   "authority": "https://login.example/TENANT/v2.0",
///   "tenantId": "TENANT",
///   "tokenStorage": "secret-service",
///   "compatibility": ["microsoft-broker1"],
///   "browserSignOut": "always",
///   "clients": [{"clientId": "mail-app", "name": "Mail"},
///               {"clientId": "backoffice", "clientSecretFile": "/etc/shared-device-broker/backoffice.secret",
///                "clientSecretMethod": "client_secret_post"},
///               {"clientId": "kiosk-app", "allowedExecutables": ["/usr/bin/kiosk-app"]}]
/// }
/// ```
///
/// A key the broker does not know is an error that names it: a misspelt setting silently ignored
/// is a setting the administrator believes in and does not have. A client secret is read from a
/// file only its owner can read: `clientSecretFile`, or `clientSecret` in a configuration file
/// that is itself readable by its owner alone.
/// Another broker's D-Bus protocol brokerd can serve besides its own (`--compat`, `compatibility`).
public enum CompatibilityProtocol: String, Sendable, Codable, CaseIterable {
    /// Microsoft's Linux identity broker: `com.microsoft.identity.broker1`
    /// (docs/microsoft-broker1.md). Off by default: a machine with Microsoft's broker keeps it.
    case microsoftBroker1 = "microsoft-broker1"
}

public struct DaemonConfigurationFile: Decodable, Sendable {
    public struct Client: Decodable, Sendable {
        public var clientId: String
        public var name: String?
        public var clientSecret: String?
        /// A file holding the secret (surrounding white space ignored), readable by its owner alone.
        public var clientSecretFile: String?
        public var clientSecretMethod: String?
        /// When present, only processes running one of these executables may use this clientId.
        public var allowedExecutables: [String]?
        /// Scopes every sign-in of this app asks for besides the call's own.
        public var defaultScopes: [String]?

        private enum CodingKeys: String, CodingKey, CaseIterable {
            case clientId, name, clientSecret, clientSecretFile, clientSecretMethod, allowedExecutables
            case defaultScopes
        }

        /// Every key a client's entry may have (broker.conf(5) documents each).
        static let knownKeys = CodingKeys.allCases.map(\.rawValue)

        public init(from decoder: any Decoder) throws {
            let values = try WrongValue.object(decoder, keyedBy: CodingKeys.self, takes: Takes.client)
            try UnknownKey.check(decoder, known: Self.knownKeys)
            clientId = try values.required(String.self, .clientId, takes: #"a string, e.g. "mail-app""#)
            name = try values.setting(String.self, .name, takes: Takes.string)
            clientSecret = try values.setting(String.self, .clientSecret, takes: Takes.string)
            clientSecretFile = try values.setting(String.self, .clientSecretFile, takes: Takes.path)
            clientSecretMethod = try values.setting(String.self, .clientSecretMethod, takes: Takes.secretMethod)
            allowedExecutables = try values.setting(
                [String].self, .allowedExecutables, takes: #"an array of absolute paths, e.g. ["/usr/bin/kiosk-app"]"#)
            defaultScopes = try values.setting(
                [String].self, .defaultScopes, takes: #"an array of strings, e.g. ["User.Read", "Mail.Read"]"#)
        }
    }
    public var deviceMode: DeviceMode?
    public var authority: String?
    public var tenantId: String?
    /// When present, only these clientIds may use the broker.
    public var clients: [Client]?
    /// Where tokens are kept between runs: `secret-service` (the default), `plaintext-file` or `memory`.
    public var tokenStorage: TokenStorage?
    /// Whether a password sign-in may use the resource-owner password grant, which the OAuth 2.0
    /// Security BCP (RFC 9700) deprecates, where the provider offers no native authentication.
    public var allowPasswordGrant: Bool?
    /// Other brokers' protocols brokerd also serves, over the same state.
    public var compatibility: [CompatibilityProtocol]?
    /// When a sign-out also ends the provider's browser session (default: `always` in shared
    /// mode, `when-asked` in default mode).
    public var browserSignOut: BrowserSignOutPolicy?
    /// At most this many clientIds are remembered (default 1000; never fewer than `clients` names).
    public var maxClients: Int?
    /// Whether a sign-in made before the device restarted ends when brokerd starts (shared mode).
    public var signOutAfterReboot: Bool?
    /// Paths under the user's home (globs allowed) removed after every sign-out of the device.
    public var clearOnSignOut: [String]?
    /// Whether the session's screen lock ends the shift (shared mode).
    public var signOutOnLock: Bool?
    /// Seconds without the person's activity after which the device is signed out (0 or absent: off).
    public var idleSignOutSeconds: Int?
    /// The last seconds of them announced as a warning (default 60).
    public var idleWarningSeconds: Int?
    /// The provider's Shared Signals transmitter, which tells the broker of sessions it ended.
    public var sharedSignals: SharedSignals?
    /// Seconds between checks that the device's sign-in still holds at the provider (0 or absent: off).
    public var sessionCheckSeconds: Int?
    /// Capabilities every token request declares in `claims` (`xms_cc`), e.g. `["cp1"]` for CAE.
    public var clientCapabilities: [String]?
    /// The ports of 127.0.0.1 a browser sign-in's redirect may use, for providers that match the
    /// redirect URI exactly (absent: any port the system picks, as RFC 8252 allows).
    public var loopbackRedirectPorts: LoopbackRedirectPorts?
    /// How an approval on a phone names the person to the provider (CIBA's `login_hint`): a
    /// template with `{username}` (absent: the username as typed).
    public var phoneApprovalLoginHint: PhoneApprovalLoginHint?

    /// `loopbackRedirectPorts`: one port (`53100` or `"53100"`) or a short range (`"53100-53109"`).
    public struct LoopbackRedirectPorts: Decodable, Sendable, Equatable {
        public var range: ClosedRange<UInt16>
        /// The ports a range may hold: a listener per sign-in in progress, of a few at once.
        public static let maximumCount = 100
        /// Below are the privileged ports, which brokerd (a user's process) cannot listen on.
        public static let lowest = 1024

        public init(_ range: ClosedRange<UInt16>) { self.range = range }

        public init(from decoder: any Decoder) throws {
            let single = try decoder.singleValueContainer()
            let bounds: [Int]
            if let port = try? single.decode(Int.self) {
                bounds = [port, port]
            } else {
                let text = try single.decode(String.self)
                let parts = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
                let numbers = parts.compactMap { part -> Int? in
                    guard !part.isEmpty, part.count <= 5, part.allSatisfy({ $0.isASCII && $0.isNumber }) else {
                        return nil
                    }
                    return Int(part)
                }
                guard numbers.count == parts.count else {
                    throw DecodingError.dataCorruptedError(in: single, debugDescription: "not a port or range")
                }
                bounds = numbers.count == 1 ? [numbers[0], numbers[0]] : numbers
            }
            guard bounds[0] >= Self.lowest, bounds[1] <= Int(UInt16.max), bounds[0] <= bounds[1],
                bounds[1] - bounds[0] < Self.maximumCount
            else {
                throw DecodingError.dataCorruptedError(in: single, debugDescription: "not a port range brokerd takes")
            }
            range = UInt16(bounds[0])...UInt16(bounds[1])
        }
    }

    /// `sharedSignals`: the transmitter (its issuer) and the broker's own client at the authority.
    public struct SharedSignals: Decodable, Sendable {
        public var transmitter: String
        public var clientId: String
        public var clientSecretFile: String?
        public var clientSecretMethod: String?
        public var scope: String?
        public var pollSeconds: Int?

        private enum CodingKeys: String, CodingKey, CaseIterable {
            case transmitter, clientId, clientSecretFile, clientSecretMethod, scope, pollSeconds
        }

        static let knownKeys = CodingKeys.allCases.map(\.rawValue)
        /// How often the broker polls when the file does not say.
        public static let defaultPollSeconds = 30

        public init(from decoder: any Decoder) throws {
            let values = try WrongValue.object(decoder, keyedBy: CodingKeys.self, takes: Takes.sharedSignals)
            try UnknownKey.check(decoder, known: Self.knownKeys)
            transmitter = try values.required(String.self, .transmitter, takes: Takes.url)
            clientId = try values.required(String.self, .clientId, takes: Takes.string)
            clientSecretFile = try values.setting(String.self, .clientSecretFile, takes: Takes.path)
            clientSecretMethod = try values.setting(String.self, .clientSecretMethod, takes: Takes.secretMethod)
            scope = try values.setting(String.self, .scope, takes: Takes.string)
            pollSeconds = try values.setting(Int.self, .pollSeconds, in: 1...3600, takes: "seconds")
        }

        /// What the receiver needs: the transmitter checked as an authority is, the secret read
        /// from its file (readable by its owner alone).
        public func settings(deviceId: String) throws(DaemonError) -> SharedSignalsSettings {
            let transmitter: Authority
            do { transmitter = try Authority(self.transmitter) } catch {
                throw DaemonError.configuration("sharedSignals.transmitter \(self.transmitter): \(error)")
            }
            guard let file = clientSecretFile else {
                throw DaemonError.configuration(
                    "sharedSignals needs clientSecretFile: the broker's own client authenticates with a secret "
                        + "(the client-credentials grant), kept in a file only brokerd's user can read")
            }
            guard file.hasPrefix("/") else {
                throw DaemonError.configuration(
                    "sharedSignals.clientSecretFile is \"\(file)\", not an absolute path: give the file's full path")
            }
            let method: ClientSecret.Method
            switch clientSecretMethod {
            case nil: method = .basic
            case let name?:
                guard let known = ClientSecret.Method(rawValue: name) else {
                    throw DaemonError.configuration(
                        "sharedSignals.clientSecretMethod is \"\(name)\": it must be client_secret_basic or "
                            + "client_secret_post")
                }
                method = known
            }
            return SharedSignalsSettings(
                transmitter: transmitter, clientId: clientId,
                clientSecret: ClientSecret(secret: try SecretFile.read(file), method: method), scope: scope,
                deviceId: deviceId)
        }
    }

    private enum CodingKeys: String, CodingKey, CaseIterable {
        case deviceMode, authority, tenantId, clients, tokenStorage, allowPasswordGrant, compatibility, browserSignOut
        case maxClients, signOutAfterReboot, clearOnSignOut, signOutOnLock, idleSignOutSeconds, idleWarningSeconds
        case sharedSignals, sessionCheckSeconds, clientCapabilities, loopbackRedirectPorts, phoneApprovalLoginHint
    }

    /// Every key the file may have (broker.conf(5) documents each).
    static let knownKeys = CodingKeys.allCases.map(\.rawValue)

    public init(from decoder: any Decoder) throws {
        let values = try WrongValue.object(decoder, keyedBy: CodingKeys.self, takes: "an object of settings")
        try UnknownKey.check(decoder, known: Self.knownKeys)
        deviceMode = try values.setting(DeviceMode.self, .deviceMode, takes: Takes.oneOf(DeviceMode.self))
        authority = try values.setting(String.self, .authority, takes: Takes.url)
        tenantId = try values.setting(String.self, .tenantId, takes: Takes.string)
        clients = try values.setting([Client].self, .clients, takes: "an array of \(Takes.client)")
        tokenStorage = try values.setting(TokenStorage.self, .tokenStorage, takes: Takes.oneOf(TokenStorage.self))
        allowPasswordGrant = try values.setting(Bool.self, .allowPasswordGrant, takes: Takes.bool)
        compatibility = try values.setting(
            [CompatibilityProtocol].self, .compatibility,
            takes: "an array of protocol names, each \(Takes.oneOf(CompatibilityProtocol.self)), e.g. "
                + #"["microsoft-broker1"]"#)
        browserSignOut = try values.setting(
            BrowserSignOutPolicy.self, .browserSignOut, takes: Takes.oneOf(BrowserSignOutPolicy.self))
        maxClients = try values.setting(Int.self, .maxClients, in: 1...1_000_000, takes: "clientIds")
        signOutAfterReboot = try values.setting(Bool.self, .signOutAfterReboot, takes: Takes.bool)
        clearOnSignOut = try values.setting(
            [String].self, .clearOnSignOut, takes: #"an array of paths under the home directory, e.g. ["Downloads/*"]"#)
        signOutOnLock = try values.setting(Bool.self, .signOutOnLock, takes: Takes.bool)
        idleSignOutSeconds = try values.setting(Int.self, .idleSignOutSeconds, in: 0...86_400, takes: "seconds")
        idleWarningSeconds = try values.setting(Int.self, .idleWarningSeconds, in: 0...86_400, takes: "seconds")
        sharedSignals = try values.setting(SharedSignals.self, .sharedSignals, takes: Takes.sharedSignals)
        sessionCheckSeconds = try values.setting(Int.self, .sessionCheckSeconds, in: 0...86_400, takes: "seconds")
        loopbackRedirectPorts = try values.setting(
            LoopbackRedirectPorts.self, .loopbackRedirectPorts, takes: Takes.loopbackRedirectPorts)
        if let template = try values.setting(String.self, .phoneApprovalLoginHint, takes: Takes.loginHint) {
            do throws(PhoneApprovalLoginHint.Problem) {
                phoneApprovalLoginHint = try PhoneApprovalLoginHint(template)
            } catch {
                throw WrongValue(
                    place: "phoneApprovalLoginHint", found: "is \"\(template)\"",
                    advice: "it \(error.why); it takes \(Takes.loginHint)")
            }
        }
        let capabilities = #"an array of capability names, e.g. ["cp1"]"#
        clientCapabilities = try values.setting([String].self, .clientCapabilities, takes: capabilities)
        for capability in clientCapabilities ?? []
        where capability.isEmpty || capability.count > 64
            || !capability.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        {
            throw WrongValue(
                place: "clientCapabilities", found: "holds \"\(capability)\"",
                takes: "short names such as cp1 (letters, digits, - and _)")
        }
    }

    public init(
        deviceMode: DeviceMode? = nil, authority: String? = nil, tenantId: String? = nil, clients: [Client]? = nil,
        tokenStorage: TokenStorage? = nil, allowPasswordGrant: Bool? = nil,
        compatibility: [CompatibilityProtocol]? = nil, browserSignOut: BrowserSignOutPolicy? = nil,
        maxClients: Int? = nil, signOutAfterReboot: Bool? = nil, clearOnSignOut: [String]? = nil,
        signOutOnLock: Bool? = nil, idleSignOutSeconds: Int? = nil, idleWarningSeconds: Int? = nil,
        sharedSignals: SharedSignals? = nil, sessionCheckSeconds: Int? = nil, clientCapabilities: [String]? = nil,
        loopbackRedirectPorts: LoopbackRedirectPorts? = nil, phoneApprovalLoginHint: PhoneApprovalLoginHint? = nil
    ) {
        self.loopbackRedirectPorts = loopbackRedirectPorts
        self.phoneApprovalLoginHint = phoneApprovalLoginHint
        self.sharedSignals = sharedSignals
        self.sessionCheckSeconds = sessionCheckSeconds
        self.clientCapabilities = clientCapabilities
        self.signOutOnLock = signOutOnLock
        self.idleSignOutSeconds = idleSignOutSeconds
        self.idleWarningSeconds = idleWarningSeconds
        self.maxClients = maxClients
        self.signOutAfterReboot = signOutAfterReboot
        self.clearOnSignOut = clearOnSignOut
        self.compatibility = compatibility
        self.browserSignOut = browserSignOut
        self.deviceMode = deviceMode
        self.authority = authority
        self.tenantId = tenantId
        self.clients = clients
        self.tokenStorage = tokenStorage
        self.allowPasswordGrant = allowPasswordGrant
    }

    /// Where the administrator's configuration lives. It wins over the user's file and flags.
    public static let administratorPath = "/etc/shared-device-broker/broker.conf"

    /// Whose a configuration file is, which decides who may own it. Nobody else may write either:
    /// whoever can write one decides the provider brokerd trusts, the apps it serves and, in the
    /// administrator's, the device mode.
    enum Author {
        /// `/etc/shared-device-broker/broker.conf` (or `--admin-config`): root's alone.
        case administrator
        /// `--config`: the user's own, or root's.
        case user
    }

    /// The administrator's configuration: `administratorPath` when it exists, else `fallback`
    /// (for tests and staged installs; it never hides an existing administrator file), else none.
    /// The file must belong to root and be writable by nobody else, or brokerd refuses to start:
    /// a device mode anyone could have written is no administrator's decision. One that exists
    /// but cannot be read stops the start too, rather than leave the user's file in charge.
    public static func loadAdministrator(fallback: String? = nil) throws(DaemonError) -> DaemonConfigurationFile? {
        try loadAdministratorFile(fallback: fallback)?.file
    }

    /// The same, with the path it was read from.
    public static func loadAdministratorFile(fallback: String? = nil) throws(DaemonError) -> (
        file: DaemonConfigurationFile, path: String
    )? {
        // A path given is one the administrator means: a mistyped one must not quietly leave the
        // device without the administrator's settings, as a missing --config file does not.
        if let fallback {
            var status = stat()
            if stat(fallback, &status) != 0, errno == ENOENT || errno == ENOTDIR {
                throw DaemonError.configuration(
                    "--admin-config \(fallback): no such file; give the path of an existing file (owned by root, "
                        + "chmod 644), or leave the flag out to read \(administratorPath) alone")
            }
        }
        for path in [administratorPath] + (fallback.map { [$0] } ?? []) {
            if let file = try readChecked(path, by: .administrator) {
                return (try parse(file.bytes, path: path, permissions: file.permissions), path)
            }
        }
        return nil
    }

    /// This configuration with every setting `administrator` makes taking its place.
    public func overridden(by administrator: DaemonConfigurationFile?) -> DaemonConfigurationFile {
        guard let administrator else { return self }
        return DaemonConfigurationFile(
            deviceMode: administrator.deviceMode ?? deviceMode,
            authority: administrator.authority ?? authority,
            tenantId: administrator.tenantId ?? tenantId,
            clients: administrator.clients ?? clients,
            tokenStorage: administrator.tokenStorage ?? tokenStorage,
            allowPasswordGrant: administrator.allowPasswordGrant ?? allowPasswordGrant,
            compatibility: administrator.compatibility ?? compatibility,
            browserSignOut: administrator.browserSignOut ?? browserSignOut,
            maxClients: administrator.maxClients ?? maxClients,
            signOutAfterReboot: administrator.signOutAfterReboot ?? signOutAfterReboot,
            clearOnSignOut: administrator.clearOnSignOut ?? clearOnSignOut,
            signOutOnLock: administrator.signOutOnLock ?? signOutOnLock,
            idleSignOutSeconds: administrator.idleSignOutSeconds ?? idleSignOutSeconds,
            idleWarningSeconds: administrator.idleWarningSeconds ?? idleWarningSeconds,
            sharedSignals: administrator.sharedSignals ?? sharedSignals,
            sessionCheckSeconds: administrator.sessionCheckSeconds ?? sessionCheckSeconds,
            clientCapabilities: administrator.clientCapabilities ?? clientCapabilities,
            loopbackRedirectPorts: administrator.loopbackRedirectPorts ?? loopbackRedirectPorts,
            phoneApprovalLoginHint: administrator.phoneApprovalLoginHint ?? phoneApprovalLoginHint)
    }

    /// The user's configuration (`--config`): a regular file of the user's or root's that nobody
    /// else may write.
    public static func load(path: String) throws(DaemonError) -> DaemonConfigurationFile {
        guard let file = try readChecked(path, by: .user) else {
            throw DaemonError.configuration(
                "cannot read the configuration file \(path): \(String(cString: strerror(ENOENT)))")
        }
        return try parse(file.bytes, path: path, permissions: file.permissions)
    }

    /// Reads a configuration file once it is known to be a regular file that only its owner may
    /// change, that owner being one `author` allows; nil when there is no file at `path`.
    static func readChecked(_ path: String, by author: Author) throws(DaemonError) -> FileBytes.RegularFile? {
        let what =
            author == .administrator ? "the administrator's configuration \(path)" : "the configuration file \(path)"
        let file: FileBytes.RegularFile
        do {
            file = try FileBytes.readRegularFile(path)
        } catch {
            switch error {
            case .open(let code) where code == ENOENT || code == ENOTDIR:
                return nil
            case .notRegular(let kind):
                let fix =
                    author == .administrator
                    ? "replace it with a regular file owned by root (chmod 644)" : "give --config a regular file"
                throw DaemonError.configuration("\(what) is \(kind), not a regular file: \(fix)")
            case .open(let code), .read(let code):
                let fix =
                    code == EACCES
                    ? "; brokerd runs as uid \(getuid()) and must be able to read it (chmod 644 \(path))" : ""
                throw DaemonError.configuration("cannot read \(what): \(String(cString: strerror(code)))\(fix)")
            }
        }
        let user = getuid()
        let owners: [uid_t] = author == .administrator ? [0] : [user, 0]
        if owners.contains(file.owner), file.permissions & 0o022 == 0 { return file }
        let state = "owner \(file.owner), mode \(String(file.permissions, radix: 8))"
        switch author {
        case .administrator:
            throw DaemonError.configuration(
                "\(what) must belong to root and be writable by nobody else (\(state)); fix it with: chown root:root "
                    + "\(path) && chmod 644 \(path)")
        case .user:
            let fix =
                owners.contains(file.owner)
                ? "chmod go-w \(path)"
                : "copy it to a file of your own (uid \(user)), chmod 644 that copy and give it to --config"
            throw DaemonError.configuration(
                "\(what) must belong to this user (uid \(user)) or root and be writable by nobody else (\(state)): "
                    + "whoever else can write it decides the provider and the apps brokerd serves; fix it with: \(fix)")
        }
    }

    /// Reads a configuration file's text (`path` names it in messages). `permissions` are the
    /// file's: an inline client secret is accepted only where nobody but its owner can read it.
    static func parse(_ bytes: [UInt8], path: String, permissions: UInt32) throws(DaemonError)
        -> DaemonConfigurationFile
    {
        do {
            try StrictJSON.check(bytes, rules: .configuration)
        } catch {
            throw DaemonError.configuration("the configuration file \(path) \(error)")
        }
        let file: DaemonConfigurationFile
        do {
            file = try JSONDecoder().decode(DaemonConfigurationFile.self, from: Data(bytes))
        } catch let unknown as UnknownKey {
            throw DaemonError.configuration("the configuration file \(path) \(unknown)")
        } catch let wrong as WrongValue {
            throw DaemonError.configuration("the configuration file \(path): \(wrong)")
        } catch {
            throw DaemonError.configuration("the configuration file \(path) is not valid: \(error)")
        }
        try file.checkClients(path)
        if let inline = file.clients?.first(where: { $0.clientSecret != nil }), permissions & 0o077 != 0 {
            throw DaemonError.configuration(
                "the configuration file \(path) holds the client secret of \(inline.clientId), but others can read it "
                    + "(mode \(String(permissions, radix: 8))): put the secret in a file of its own that only "
                    + "brokerd's user can read (chmod 600) and name it with clientSecretFile, or chmod 600 \(path)")
        }
        return file
    }

    /// What JSON's types do not say about `clients`: each app once, under a clientId an app can
    /// send; programs and files named by absolute paths (a relative one would never match
    /// `/proc/PID/exe`, or would be looked for wherever brokerd happened to start); and no setting
    /// that cannot take effect.
    func checkClients(_ path: String) throws(DaemonError) {
        var firstIndex: [String: Int] = [:]
        for (index, client) in (clients ?? []).enumerated() {
            let place = "clients[\(index)]"
            func refuse(_ why: String) -> DaemonError { .configuration("the configuration file \(path): \(why)") }
            do {
                try InputRules.clientId(client.clientId)
            } catch {
                throw refuse("\(place).clientId is not one an app can send (\(error.message)): fix it")
            }
            if let earlier = firstIndex[client.clientId] {
                throw refuse(
                    "clients[\(earlier)] and \(place) both have clientId \"\(client.clientId)\": keep one entry "
                        + "per app")
            }
            firstIndex[client.clientId] = index
            if let executables = client.allowedExecutables {
                guard !executables.isEmpty else {
                    throw refuse(
                        "\(place).allowedExecutables is empty, so no program could use \(client.clientId): list its "
                            + "programs, or remove \(client.clientId) from clients")
                }
                for (number, executable) in executables.enumerated() where !executable.hasPrefix("/") {
                    throw refuse(
                        "\(place).allowedExecutables[\(number)] is \"\(executable)\", not an absolute path, so it "
                            + "would never match a program: give the program's full path, as /proc/PID/exe shows it")
                }
            }
            for (number, scope) in (client.defaultScopes ?? []).enumerated() {
                do {
                    try InputRules.scopes([scope])
                } catch {
                    throw refuse(
                        "\(place).defaultScopes[\(number)] is \"\(scope)\", not a scope an app could ask for "
                            + "(\(error.message)): fix it")
                }
            }
            if (client.defaultScopes?.count ?? 0) > InputRules.maxScopes {
                throw refuse(
                    "\(place).defaultScopes names \(client.defaultScopes?.count ?? 0) scopes; at most "
                        + "\(InputRules.maxScopes) are allowed")
            }
            if let file = client.clientSecretFile, !file.hasPrefix("/") {
                throw refuse(
                    "\(place).clientSecretFile is \"\(file)\", not an absolute path: give the file's full path")
            }
            do throws(Client.SecretProblem) {
                _ = try client.secretMethod()
            } catch {
                throw refuse("\(place) (clientId \(client.clientId)) \(error.why)")
            }
        }
    }

    /// What no single file shows, checked on the settings in force (the administrator's over the
    /// user's): a setting that could not take effect stops the start rather than be believed in.
    public func checkSettingsTakeEffect() throws(DaemonError) {
        if let warning = idleWarningSeconds, warning > 0 {
            let signOut = idleSignOutSeconds ?? 0
            if signOut == 0 {
                let state = idleSignOutSeconds == nil ? "not set" : "0"
                throw DaemonError.configuration(
                    "idleWarningSeconds is \(warning) but idleSignOutSeconds is \(state), "
                        + "so there is no sign-out after inactivity to warn of: set idleSignOutSeconds to more than "
                        + "\(warning) (say \(max(300, warning * 5))), or remove idleWarningSeconds")
            }
            if warning >= signOut {
                throw DaemonError.configuration(
                    "idleWarningSeconds is \(warning), not less than idleSignOutSeconds (\(signOut)): the warning "
                        + "is the last idleWarningSeconds of idleSignOutSeconds, so it would begin before the person "
                        + "was inactive at all: make idleWarningSeconds less than idleSignOutSeconds, or 0 for no "
                        + "warning")
            }
        }
    }

    /// clientId -> the scopes every sign-in of it asks for, for the clients that have some.
    public func defaultScopes() -> [String: [String]] {
        var scopes: [String: [String]] = [:]
        for client in clients ?? [] {
            if let defaults = client.defaultScopes, !defaults.isEmpty { scopes[client.clientId] = defaults }
        }
        return scopes
    }

    /// clientId -> the executables allowed to use it, for the clients that are bound.
    public func allowedExecutables() -> [String: Set<String>] {
        var bound: [String: Set<String>] = [:]
        for client in clients ?? [] {
            if let executables = client.allowedExecutables { bound[client.clientId] = Set(executables) }
        }
        return bound
    }

    /// The configured client secrets, for confidential clients.
    public func clientSecrets() throws(DaemonError) -> [String: ClientSecret] {
        var secrets: [String: ClientSecret] = [:]
        for client in clients ?? [] {
            let method: ClientSecret.Method
            do throws(Client.SecretProblem) {
                guard let known = try client.secretMethod() else { continue }
                method = known
            } catch {
                throw DaemonError.configuration("the configuration's client \(client.clientId) \(error.why)")
            }
            let secret: String
            if let inline = client.clientSecret {
                secret = inline
            } else if let file = client.clientSecretFile {
                secret = try SecretFile.read(file)
            } else {
                continue
            }
            secrets[client.clientId] = ClientSecret(secret: secret, method: method)
        }
        return secrets
    }
}

extension DaemonConfigurationFile.Client {
    /// Why a client's secret settings cannot be what was meant, worded to follow the client's name.
    struct SecretProblem: Error {
        var why: String
    }

    /// How this client sends its secret; nil for a public client (no secret). A method without a
    /// secret, an unknown method, or a secret given twice is a ``SecretProblem``.
    func secretMethod() throws(SecretProblem) -> ClientSecret.Method? {
        let hasSecret = clientSecret != nil || clientSecretFile != nil
        if clientSecret != nil && clientSecretFile != nil {
            throw SecretProblem(why: "gives both clientSecret and clientSecretFile: keep one")
        }
        guard let name = clientSecretMethod else { return hasSecret ? .basic : nil }
        guard let method = ClientSecret.Method(rawValue: name) else {
            throw SecretProblem(
                why: "has clientSecretMethod \"\(name)\": it must be client_secret_basic or client_secret_post")
        }
        guard hasSecret else {
            throw SecretProblem(
                why: "has a clientSecretMethod but no clientSecret or clientSecretFile: add the secret, or remove "
                    + "clientSecretMethod")
        }
        return method
    }
}

/// A key of the configuration the broker does not know, with where it stands.
/// A value a key does not take, named with where it stands, what it holds and what it takes:
/// `deviceMode is "kiosk"; it takes "shared" or "default"`. Decoding's own words name Swift's
/// types and a coding path; an administrator needs the key and the values it takes.
struct WrongValue: Error, CustomStringConvertible {
    var place: String
    /// `is "kiosk"`, `has no clientId`.
    var found: String
    /// `it takes "shared" or "default"`.
    var advice: String

    var description: String { "\(place) \(found); \(advice)" }

    init(place: String, found: String, takes: String) {
        self.init(place: place, found: found, advice: "it takes \(takes)")
    }

    init(place: String, found: String, advice: String) {
        self.place = place
        self.found = found
        self.advice = advice
    }

    /// `clients[0].name` for a decoder's path.
    static func render(_ path: [any CodingKey]) -> String {
        String(path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined().dropFirst())
    }

    /// The object `decoder` stands at, or a ``WrongValue`` when it holds something else.
    static func object<Key: CodingKey>(_ decoder: any Decoder, keyedBy: Key.Type, takes: String) throws
        -> KeyedDecodingContainer<Key>
    {
        do { return try decoder.container(keyedBy: Key.self) } catch is DecodingError {
            let path = decoder.codingPath
            throw WrongValue(
                place: path.isEmpty ? "the file" : render(path),
                found: "is \((try? FoundValue(from: decoder))?.description ?? "not an object")",
                takes: path.isEmpty ? "a JSON object of settings, e.g. {\"deviceMode\": \"shared\"}" : takes)
        }
    }
}

/// What a key takes, in the words broker.conf(5) uses.
enum Takes {
    static let string = "a string"
    static let bool = "true or false, written without quotes"
    static let url = #"a URL, e.g. "https://login.example/TENANT/v2.0""#
    static let path = #"an absolute path, e.g. "/etc/shared-device-broker/app.secret""#
    static let secretMethod = #""client_secret_basic" or "client_secret_post""#
    static let loopbackRedirectPorts =
        "a port of 127.0.0.1 from \(DaemonConfigurationFile.LoopbackRedirectPorts.lowest) to 65535, or a range of at "
        + "most \(DaemonConfigurationFile.LoopbackRedirectPorts.maximumCount) of them, lowest first, e.g. 53100 or "
        + #""53100-53109""#
    static let loginHint =
        #"a template of CIBA's login_hint in which {username} stands for the username, e.g. "#
        + #""{\"username\":\"{username}\"}""#
    static let client = #"objects, one per app, e.g. {"clientId": "mail-app", "name": "Mail"}"#
    static let sharedSignals =
        #"an object, e.g. {"transmitter": "https://login.example/TENANT/v2.0", "clientId": "broker", "#
        + #""clientSecretFile": "/etc/shared-device-broker/ssf.secret"}"#

    /// `"shared" or "default"`: every value of `type`, quoted.
    static func oneOf<T: CaseIterable & RawRepresentable>(_ type: T.Type) -> String where T.RawValue == String {
        let names = T.allCases.map { "\"\($0.rawValue)\"" }
        guard let last = names.last else { return "nothing" }
        return names.count == 1 ? last : names.dropLast().joined(separator: ", ") + " or " + last
    }
}

/// Any JSON value, shown as it was written (shortened), for a message about a value a key does
/// not take.
struct FoundValue: Decodable, CustomStringConvertible {
    var description: String

    init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer() {
            if single.decodeNil() {
                description = "null"
                return
            }
            if let value = try? single.decode(Bool.self) {
                description = "\(value)"
                return
            }
            if let value = try? single.decode(Int.self) {
                description = "\(value)"
                return
            }
            if let value = try? single.decode(Double.self) {
                description = "\(value)"
                return
            }
            if let value = try? single.decode(String.self) {
                description = Self.shortened("\"\(value)\"")
                return
            }
        }
        if var elements = try? decoder.unkeyedContainer() {
            var shown: [String] = []
            while !elements.isAtEnd, shown.count < 8 {
                guard let element = try? elements.decode(FoundValue.self) else { break }
                shown.append(element.description)
            }
            description = Self.shortened("[" + shown.joined(separator: ", ") + (elements.isAtEnd ? "]" : ", ...]"))
            return
        }
        description = "an object"
    }

    private static func shortened(_ text: String) -> String {
        text.count <= 80 ? text : String(text.prefix(77)) + "..."
    }
}

extension KeyedDecodingContainer {
    /// The value of `key`, nil when absent; one of another type is a ``WrongValue`` that says
    /// what the file holds there and what the key `takes`.
    func setting<T: Decodable>(_ type: T.Type, _ key: Key, takes: String) throws -> T? {
        do {
            return try decodeIfPresent(type, forKey: key)
        } catch  where !(error is WrongValue) && !(error is UnknownKey) {
            // A nested object's own keys throw their own ``WrongValue``; what reaches here is
            // about the value of `key` itself, or an element of it (JSONDecoder throws errors of
            // its own besides DecodingError: a fraction where a whole number goes, say).
            let found = (try? decode(FoundValue.self, forKey: key))?.description ?? "of another type"
            throw WrongValue(place: WrongValue.render(codingPath + [key]), found: "is \(found)", takes: takes)
        }
    }

    /// The same, for a key that must be there.
    func required<T: Decodable>(_ type: T.Type, _ key: Key, takes: String) throws -> T {
        guard let value = try setting(type, key, takes: takes) else {
            throw WrongValue(
                place: codingPath.isEmpty ? "the file" : WrongValue.render(codingPath),
                found: "has no \(key.stringValue)", advice: "add it: \(key.stringValue) takes \(takes)")
        }
        return value
    }

    /// A whole number within `range`, of `unit`.
    func setting(_ type: Int.Type, _ key: Key, in range: ClosedRange<Int>, takes unit: String) throws -> Int? {
        let takes =
            "a whole number of \(unit) from \(range.lowerBound) to \(range.upperBound), written without quotes"
        guard let value = try setting(Int.self, key, takes: takes) else { return nil }
        guard range.contains(value) else {
            throw WrongValue(place: WrongValue.render(codingPath + [key]), found: "is \(value)", takes: takes)
        }
        return value
    }
}

struct UnknownKey: Error, CustomStringConvertible {
    var key: String
    var place: String
    var known: [String]

    var description: String {
        "has an unknown key \"\(key)\" \(place) (the keys there are \(known.sorted().joined(separator: ", ")))"
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// Throws for the first key of `decoder`'s object that is not in `known`.
    static func check(_ decoder: any Decoder, known: [String]) throws {
        let keys = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue)
        guard let unknown = keys.sorted().first(where: { !known.contains($0) }) else { return }
        let path = decoder.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        throw UnknownKey(
            key: unknown, place: path.isEmpty ? "at the top level" : "in \(path.dropFirst())", known: known)
    }
}

/// A client secret's file, and the rule for any file that holds one: only its owner may read it.
enum SecretFile {
    /// The secret `path` holds, without surrounding white space.
    static func read(_ path: String) throws(DaemonError) -> String {
        let file: FileBytes.RegularFile
        do {
            file = try FileBytes.readRegularFile(path, limit: 4096)
        } catch {
            throw DaemonError.configuration("cannot read the client secret file \(path): \(error)")
        }
        guard file.permissions & 0o077 == 0 else {
            throw DaemonError.configuration(
                "the client secret file \(path) can be read by others (mode \(String(file.permissions, radix: 8))): "
                    + "chmod 600 \(path)")
        }
        let text = String(decoding: file.bytes, as: UTF8.self)
        let secret = String(text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
        guard !secret.isEmpty else { throw DaemonError.configuration("the client secret file \(path) is empty") }
        return secret
    }
}

/// Why brokerd could not start.
public enum DaemonError: Error, CustomStringConvertible {
    case configuration(String)
    case state(String)
    case bus(String)

    public var description: String {
        switch self {
        case .configuration(let why), .state(let why), .bus(let why): return why
        }
    }
}
