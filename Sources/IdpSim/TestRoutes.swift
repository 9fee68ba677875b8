import Foundation
import Hummingbird

/// Test-only endpoints under `/test/`. They exist so integration tests can observe and steer the
/// provider; a real identity provider has nothing like them and the broker must never call them.
struct TestRoutes: Sendable {
    let provider: Provider

    static let modes = FaultInjector.Mode.allCases.map(\.rawValue).joined(separator: "|")
    static let endpoints = FaultInjector.Endpoint.allCases.map(\.rawValue).joined(separator: "|")

    func register(on router: Router<BasicRequestContext>) {
        router.get("/test/stats") { _, _ in
            JSONBody.response(await provider.stats.snapshot().json)
        }
        router.post("/test/stats/reset") { _, _ in
            await provider.stats.reset()
            return JSONBody.response(["reset": true])
        }
        router.post("/test/revoke-all") { request, _ in
            guard let username = request.queryParameters.nonEmpty("username") else {
                throw OAuthError.invalidRequest("username query parameter is required")
            }
            let revoked = await provider.refreshTokens.revokeAll(username: username)
            let secrets = await provider.deviceSecrets.revokeAll(username: username)
            provider.logger.info(
                "admin revocation",
                metadata: ["user": "\(username)", "families": "\(revoked)", "deviceSecrets": "\(secrets)"])
            return JSONBody.response([
                "username": username, "revokedFamilies": revoked, "revokedDeviceSecrets": secrets,
            ])
        }
        router.post("/test/revoke-device-secrets") { request, _ in
            guard let username = request.queryParameters.nonEmpty("username") else {
                throw OAuthError.invalidRequest("username query parameter is required")
            }
            let secrets = await provider.deviceSecrets.revokeAll(username: username)
            provider.logger.info(
                "admin revocation of device secrets", metadata: ["user": "\(username)", "deviceSecrets": "\(secrets)"])
            return JSONBody.response(["username": username, "revokedDeviceSecrets": secrets])
        }
        router.post("/test/age-sessions") { request, _ in
            guard let seconds = request.queryParameters["seconds"].flatMap(Double.init), seconds >= 0 else {
                throw OAuthError.invalidRequest("seconds query parameter (a non-negative number) is required")
            }
            let sessions = await provider.authorization.ageSessions(by: seconds)
            return JSONBody.response(["agedSessions": sessions])
        }
        router.get("/test/faults") { request, _ in
            let name = request.queryParameters["endpoint"] ?? "token"
            guard let endpoint = FaultInjector.Endpoint(rawValue: name) else {
                throw OAuthError.invalidRequest("unknown endpoint \(name); expected \(Self.endpoints)")
            }
            return JSONBody.response(encoding: await provider.faults.current(endpoint))
        }
        router.post("/test/faults") { request, _ in
            let body = try await request.body.collect(upTo: 1 << 16)
            guard
                let setting = try? JSONDecoder().decode(FaultInjector.Setting.self, from: Data(body.readableBytesView))
            else {
                throw OAuthError.invalidRequest(
                    "expected {\"mode\": \"\(Self.modes)\", \"endpoint\"?: \"\(Self.endpoints)\", "
                        + "\"retryAfter\"?, \"delayMs\"?, \"count\"?, \"sizeBytes\"?}")
            }
            guard setting.mode.applies(to: setting.target) else {
                throw OAuthError.invalidRequest(
                    "the mode \(setting.mode.rawValue) does not apply to the \(setting.target.rawValue) endpoint")
            }
            await provider.faults.set(setting)
            provider.logger.notice(
                "fault mode set",
                metadata: ["mode": "\(setting.mode.rawValue)", "endpoint": "\(setting.target.rawValue)"])
            return JSONBody.response(encoding: setting)
        }
        router.get("/test/outbox") { _, _ in
            JSONBody.response(encoding: await provider.outbox.messages())
        }
        router.get("/test/browser-requests") { _, _ in
            JSONBody.response(encoding: await provider.browserRequests.all())
        }
    }
}
