import ArgumentParser
import Foundation
import Hummingbird
import Logging
import NIOCore

/// `idp-sim`: a local OpenID Connect provider for tests and development. Never ship it.
@main
struct IdpSimCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idp-sim",
        abstract: "A local OpenID Connect identity provider for tests (in-memory, Entra-shaped).")

    @Option(help: "TCP port to listen on; 0 picks a free one.")
    var port: Int = 0

    @Option(help: "Address to bind.")
    var host: String = "127.0.0.1"

    @Option(help: "JSON file with tenantId, users and clients.")
    var users: String

    @Option(help: "Path of the authority below the server root (default /TENANT_ID/v2.0).")
    var issuerPath: String?

    @Option(help: "Access and ID token lifetime in seconds.")
    var accessTokenLifetime: Int = 3600

    @Option(help: "Refresh token lifetime in seconds (default 90 days).")
    var refreshTokenLifetime: Int = 90 * 24 * 3600

    @Option(help: "Lifetime of one-time codes and authorization codes in seconds.")
    var codeLifetime: Int = 600

    @Option(
        name: .customLong("without"),
        help: ArgumentHelp(
            "Leave out an optional part, as a plainer provider would: "
                + "\(OptionalFeature.allCases.map(\.rawValue).joined(separator: ", ")). Repeatable.")
    )
    var without: [OptionalFeature] = []

    @Option(help: "Lifetime of device codes (RFC 8628) in seconds.")
    var deviceCodeLifetime: Int = 900

    @Option(help: "The polling interval, in seconds, a device is given with its device code.")
    var deviceCodeInterval: Int = 5

    @Option(help: "How many device-code polls to answer slow_down first, whatever their pace (for tests).")
    var deviceCodeSlowDown: Int = 0

    @Option(help: "Lifetime of backchannel authentication (CIBA) requests in seconds.")
    var cibaLifetime: Int = 120

    @Option(help: "The polling interval, in seconds, a client is given with its auth_req_id (CIBA).")
    var cibaInterval: Int = 5

    @Option(help: "How many polls of each CIBA request to answer slow_down first, whatever their pace (for tests).")
    var cibaSlowDown: Int = 0

    @Flag(
        name: .customLong("entra-common"),
        help: ArgumentHelp(
            "Mimic Microsoft Entra ID's multi-tenant authority exactly: /common/v2.0, its discovery issuer "
                + "the template {base}/{tenantid}/v2.0, each token issued by the user's own tenant (a user's "
                + "tenantId in the users file), and neither revocation, native authentication nor single "
                + "sign-on by token exchange, nor a Shared Signals transmitter, nor CIBA."))
    var entraCommon = false

    @Flag(
        help: ArgumentHelp(
            "Misbehave: ignore prompt=login and max_age, so that a browser session signs in again at once with "
                + "its old auth_time (to test that the broker refuses it)."))
    var ignoreReauthentication = false

    @Flag(
        help: ArgumentHelp(
            "Misbehave: refuse every token revocation with 401 and no body, as a provider that lets no public "
                + "client revoke (to test that the broker gives a refusal up)."))
    var refuseRevocation = false

    @Flag(
        help: ArgumentHelp(
            "Answer every path without a route (native authentication's too, with --without native-auth) with an "
                + "HTML login page, 200, as a web server in front of a provider may."))
    var loginPageForUnknownPaths = false

    @Flag(
        help: ArgumentHelp(
            "Match redirect_uri exactly, port included, against the client's registered redirectUris (as many "
                + "providers do, against RFC 8252's any-port rule for loopback); a client with none registered "
                + "can then not use the browser flow."))
    var exactRedirectUris = false

    @Option(
        help: ArgumentHelp(
            "Misbehave as --ignore-reauthentication does, but only for a browser session younger than this many "
                + "seconds (a session just made taken for a fresh authentication).",
            valueName: "seconds"))
    var ignoreReauthenticationWithin: Int?

    @Flag(
        help: ArgumentHelp(
            "Misbehave: refuse an authorization request that carries max_age, as some providers do (invalid_request, "
                + "\"max_age invalid\", sent to the redirect URI)."))
    var refuseMaxAge = false

    @Option(
        help: ArgumentHelp(
            "What ID tokens carry as auth_time: honest (when the person authenticated), zero (0, a provider's bug) "
                + "or absent."))
    var authTime: AuthTimeClaim = .honest

    @Flag(
        help: ArgumentHelp(
            "ID tokens carry only the claims OpenID Connect requires (no preferred_username, name or email): the "
                + "names are in userinfo alone, as the standard allows and some providers do."))
    var namesInUserinfoOnly = false

    @Option(help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        guard accessTokenLifetime > 0, refreshTokenLifetime > 0, codeLifetime > 0, deviceCodeLifetime > 0,
            deviceCodeInterval > 0, deviceCodeSlowDown >= 0, cibaLifetime > 0, cibaInterval > 0, cibaSlowDown >= 0,
            (ignoreReauthenticationWithin ?? 1) > 0
        else {
            throw ValidationError("lifetimes must be positive")
        }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown --log-level \(logLevel)") }
        if let issuerPath, !issuerPath.hasPrefix("/") || issuerPath.hasSuffix("/") {
            throw ValidationError("--issuer-path must start with / and not end with /")
        }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "idp-sim")

        let directory: UserStore
        do {
            directory = try UserStore.load(path: users)
        } catch let error as UsersFileError {
            FileHandle.standardError.write(Data("idp-sim: \(error.description)\n".utf8))
            throw ExitCode(2)
        }

        var settings = ProviderSettings(
            accessTokenLifetime: accessTokenLifetime, refreshTokenLifetime: refreshTokenLifetime,
            codeLifetime: codeLifetime, without: Set(without), multiTenant: entraCommon,
            deviceCodeLifetime: deviceCodeLifetime, deviceCodeInterval: deviceCodeInterval,
            deviceCodeSlowDowns: deviceCodeSlowDown, cibaLifetime: cibaLifetime, cibaInterval: cibaInterval,
            cibaSlowDowns: cibaSlowDown, ignoresReauthentication: ignoreReauthentication,
            refusesRevocation: refuseRevocation, servesLoginPageForUnknownPaths: loginPageForUnknownPaths,
            exactRedirectURIs: exactRedirectUris,
            ignoresReauthenticationWithin: ignoreReauthenticationWithin, refusesMaxAge: refuseMaxAge,
            authTimeClaim: authTime, namesInUserinfoOnly: namesInUserinfoOnly)
        if entraCommon {
            settings.without.formUnion([.revocation, .nativeAuth, .nativeSSO, .tokenExchange, .sharedSignals, .ciba])
        }
        let provider = try await Provider(
            users: directory, settings: settings,
            authorityPath: entraCommon ? Endpoints.commonAuthorityPath : issuerPath ?? "/\(directory.tenantId)/v2.0",
            logger: logger)
        let endpoints = provider.endpoints
        let host = self.host
        let app = Application(
            router: provider.router(),
            configuration: .init(address: .hostname(host, port: port), serverName: "idp-sim"),
            onServerRunning: { channel in
                let boundPort = channel.localAddress?.port ?? 0
                let urlHost = host.contains(":") ? "[\(host)]" : host
                endpoints.setBaseURL("http://\(urlHost):\(boundPort)")
                // The one line tests wait for; printed only once the socket accepts connections.
                FileHandle.standardOutput.write(Data("listening on http://\(urlHost):\(boundPort)\n".utf8))
                // What brokerd's authority must be (the issuer), where an administrator looks first.
                FileHandle.standardOutput.write(Data("authority \(endpoints.baseURL + endpoints.authorityPath)\n".utf8))
            },
            logger: logger)
        try await app.runService()
    }
}
