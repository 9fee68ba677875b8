import Foundation
import Hummingbird

/// Test-only administrator actions under `/test/`, as an Entra administrator takes them in the
/// portal (revoke sessions, reset a password, disable an account, tighten conditional access),
/// and the controls of the Shared Signals transmitter a test needs: hostile SETs, stream states,
/// lost streams. The broker must never call them.
struct OperatorRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        router.post("/test/revoke-sessions") { request, _ in
            let user = try user(request)
            return JSONBody.response(try await revokeSessions(of: user, event: .sessionRevoked))
        }
        router.post("/test/change-credential") { request, _ in
            let user = try user(request)
            return JSONBody.response(try await revokeSessions(of: user, event: .credentialChange))
        }
        router.post("/test/disable-account") { request, _ in
            let user = try user(request)
            // Disabled first, so that no grant slips in between the revocation and the refusal.
            await provider.revocations.disable(username: user.username)
            var answer = try await revokeSessions(of: user, event: .accountDisabled)
            answer["disabled"] = true
            return JSONBody.response(answer)
        }
        router.post("/test/enable-account") { request, _ in
            let user = try user(request)
            let was = await provider.revocations.enable(username: user.username)
            provider.logger.info("account enabled", metadata: ["user": "\(user.username)"])
            return JSONBody.response(["username": user.username, "disabled": false, "wasDisabled": was])
        }
        router.post("/test/require-fresh-tokens") { request, _ in
            let user = try user(request)
            let at = await provider.revocations.revoke(username: user.username)
            provider.logger.info("fresh access tokens required", metadata: ["user": "\(user.username)"])
            return JSONBody.response(["username": user.username, "revokedAt": Int(at.timeIntervalSince1970)])
        }
        if provider.offers(.cae) {
            router.get("/test/last-claims") { request, _ in
                guard let clientId = request.queryParameters.nonEmpty("client_id") else {
                    throw OAuthError.invalidRequest("client_id query parameter is required")
                }
                let text = await provider.claimsRequests.last(clientId: clientId)
                let claims = text.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) }
                return JSONBody.response(["claims": claims ?? NSNull()])
            }
        }
        if provider.offers(.sharedSignals) { registerSharedSignals(on: router) }
    }

    private func registerSharedSignals(on router: Router<BasicRequestContext>) {
        router.post("/test/ssf/inject") { request, _ in
            let body = try await SharedSignalsRoutes.jsonObject(request)
            guard let username = body["username"] as? String, let user = provider.users.user(named: username) else {
                throw Self.unknownUser(body["username"] as? String ?? "")
            }
            guard let name = body["event"] as? String, let event = SecurityEventType(rawValue: name) else {
                throw OAuthError.invalidRequest(
                    "event must be one of \(SecurityEventType.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
            guard let forgery = SecurityEventForgery(rawValue: body["forgery"] as? String ?? "none") else {
                throw OAuthError.invalidRequest(
                    "forgery must be one of \(SecurityEventForgery.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
            let jtis = try await SecurityEventTransmitter(provider: provider).publish(
                event, about: user, forgery: forgery)
            let first: Any = jtis.first.map { $0 as Any } ?? NSNull()
            return JSONBody.response(["queued": jtis.count, "jti": first, "jtis": jtis])
        }
        router.post("/test/ssf/stream-status") { request, _ in
            let body = try await SharedSignalsRoutes.jsonObject(request)
            guard let name = body["status"] as? String, let status = SharedSignals.Status(rawValue: name) else {
                throw OAuthError.invalidRequest("status must be enabled, paused or disabled.")
            }
            let changed = await provider.sharedSignals.setStatus(
                status, reason: body["reason"] as? String, id: body["stream_id"] as? String)
            provider.logger.info(
                "ssf stream status set", metadata: ["status": "\(name)", "streams": "\(changed.count)"])
            return JSONBody.response(changed.map(SharedSignalsRoutes.status))
        }
        router.post("/test/ssf/delete-streams") { _, _ in
            let deleted = await provider.sharedSignals.deleteAll()
            provider.logger.info("ssf streams deleted", metadata: ["streams": "\(deleted)"])
            return JSONBody.response(["deleted": deleted])
        }
        router.get("/test/ssf/streams") { _, _ in
            let routes = SharedSignalsRoutes(provider: provider)
            let streams = await provider.sharedSignals.all().map { stream in
                var object = routes.configuration(stream)
                object["status"] = stream.status.rawValue
                object["reason"] = stream.reason
                object["queued"] = stream.queue.count
                object["acked"] = stream.acked
                return object
            }
            return JSONBody.response(streams)
        }
    }

    private func user(_ request: Request) throws -> UserAccount {
        guard let username = request.queryParameters.nonEmpty("username") else {
            throw OAuthError.invalidRequest("username query parameter is required")
        }
        guard let user = provider.users.user(named: username) else { throw Self.unknownUser(username) }
        return user
    }

    static func unknownUser(_ username: String) -> OAuthError {
        OAuthError(
            status: .notFound, error: "user_not_found", description: "The user account \(username) does not exist.",
            codes: [50034])
    }

    /// What Entra does when an administrator revokes a user's sessions (or resets the password, or
    /// disables the account): every refresh token, device secret and browser session ends, access
    /// tokens issued until now need a fresh one under CAE, and receivers hear of it.
    private func revokeSessions(of user: UserAccount, event: SecurityEventType) async throws -> [String: Any] {
        let families = await provider.refreshTokens.revokeAll(username: user.username)
        let secrets = await provider.deviceSecrets.revokeAll(username: user.username)
        let sessions = await provider.authorization.endSessions(username: user.username)
        let at = await provider.revocations.revoke(username: user.username)
        let queued = try await SecurityEventTransmitter(provider: provider).publish(event, about: user, at: at)
        provider.logger.info(
            "admin action",
            metadata: [
                "action": "\(event.rawValue)", "user": "\(user.username)", "families": "\(families)",
                "deviceSecrets": "\(secrets)", "browserSessions": "\(sessions)", "queuedEvents": "\(queued.count)",
            ])
        return [
            "username": user.username, "revokedFamilies": families, "revokedDeviceSecrets": secrets,
            "endedBrowserSessions": sessions, "queuedEvents": queued.count,
        ]
    }
}
