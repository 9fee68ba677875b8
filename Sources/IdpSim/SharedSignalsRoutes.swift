import Foundation
import Hummingbird

/// An error of the Shared Signals endpoints: a status and RFC 8936's `{"err", "description"}`
/// body, which SSF 1.0 uses for its management API too.
struct SharedSignalsError: Error, Sendable {
    var status: HTTPResponse.Status
    var err: String
    var description: String

    static func invalidRequest(_ description: String) -> SharedSignalsError {
        SharedSignalsError(status: .badRequest, err: "invalid_request", description: description)
    }

    static func notFound(_ description: String) -> SharedSignalsError {
        SharedSignalsError(status: .notFound, err: "not_found", description: description)
    }

    func response() -> Response {
        JSONBody.response(
            ["err": err, "description": description], status: status, headers: [.cacheControl: "no-store"])
    }
}

/// A Shared Signals Framework 1.0 transmitter with poll delivery (RFC 8936): its metadata
/// (§7.2), stream management (§8.1), status, verification, and the poll endpoint. Every call but
/// the metadata needs an application token of a confidential client (client credentials), and
/// a client sees only its own stream.
struct SharedSignalsRoutes: Sendable {
    let provider: Provider

    static let pollMethod = "urn:ietf:rfc:8936"
    static let metadataPath = "/.well-known/ssf-configuration"
    static let streamsPath = "/ssf/streams"
    static let statusPath = "/ssf/status"
    static let verifyPath = "/ssf/verify"
    static let pollPath = "/ssf/poll"

    func register(on router: Router<BasicRequestContext>) {
        let endpoints = provider.endpoints
        // SSF 1.0 §7.2.1: the well-known path goes between the host and the issuer's path.
        router.get(RouterPath(Self.metadataPath + endpoints.authorityPath)) { _, _ in
            await provider.stats.count("ssf-configuration")
            return JSONBody.response(metadata(), headers: [.cacheControl: "max-age=60"])
        }
        router.post(endpoints.route(Self.streamsPath)) { request, _ in
            try await create(request, client: try await authenticate(request))
        }
        router.get(endpoints.route(Self.streamsPath)) { request, _ in
            try await read(request, client: try await authenticate(request))
        }
        router.delete(endpoints.route(Self.streamsPath)) { request, _ in
            try await delete(request, client: try await authenticate(request))
        }
        router.get(endpoints.route(Self.statusPath)) { request, _ in
            let stream = try await ownStream(
                request.queryParameters["stream_id"], client: try await authenticate(request))
            return JSONBody.response(Self.status(stream))
        }
        router.post(endpoints.route(Self.statusPath)) { request, _ in
            try await updateStatus(request, client: try await authenticate(request))
        }
        router.post(endpoints.route(Self.verifyPath)) { request, _ in
            try await verify(request, client: try await authenticate(request))
        }
        router.post(endpoints.route(Self.pollPath + "/:stream")) { request, context in
            await provider.stats.count("ssf-poll")
            let (fault, replacement) = await FaultResponses.before(.ssf, provider: provider)
            if let replacement { return replacement }
            let client = try await authenticate(request)
            let id = context.parameters.get("stream") ?? ""
            return FaultResponses.after(fault, try await poll(request, streamId: id, client: client))
        }
    }

    func metadata() -> [String: Any] {
        let endpoints = provider.endpoints
        return [
            "spec_version": "1_0",
            "issuer": endpoints.issuer,
            "jwks_uri": endpoints.url(Endpoints.jwksPath),
            "delivery_methods_supported": [Self.pollMethod],
            "configuration_endpoint": endpoints.url(Self.streamsPath),
            "status_endpoint": endpoints.url(Self.statusPath),
            "verification_endpoint": endpoints.url(Self.verifyPath),
            "authorization_schemes": [["spec_urn": "urn:ietf:rfc:6749"]],
            "default_subjects": "ALL",
        ]
    }

    // MARK: - Authorization

    /// The confidential client whose application token (client credentials) the request bears:
    /// signed by this provider, unexpired, from this issuer, an app's and not a person's.
    func authenticate(_ request: Request) async throws -> ClientRegistration {
        guard let token = request.bearerToken else {
            throw Self.unauthorized("An access token from the client credentials grant is required.")
        }
        let claims: AppAccessTokenClaims
        do {
            claims = try await provider.keys.verify(token, as: AppAccessTokenClaims.self)
        } catch {
            throw Self.unauthorized("The access token is invalid or expired.")
        }
        guard claims.iss == provider.endpoints.issuer, claims.idtyp == AppAccessTokenClaims.appType,
            let client = provider.users.client(claims.appid), client.isConfidential
        else {
            throw Self.unauthorized("The access token is not an application token of a confidential client.")
        }
        return client
    }

    static func unauthorized(_ description: String) -> OAuthError {
        var error = OAuthError(status: .unauthorized, error: "invalid_token", description: description)
        error.headers[.wwwAuthenticate] = "Bearer error=\"invalid_token\""
        return error
    }

    // MARK: - Streams

    private func create(_ request: Request, client: ClientRegistration) async throws -> Response {
        let body = try await Self.jsonObject(request)
        let delivery = body["delivery"] as? [String: Any]
        let method = delivery?["method"] as? String ?? Self.pollMethod
        guard method == Self.pollMethod else {
            throw SharedSignalsError.invalidRequest(
                "The delivery method \(method) is not supported; this transmitter offers \(Self.pollMethod) only.")
        }
        guard let requested = (body["events_requested"] ?? [String]()) as? [String] else {
            throw SharedSignalsError.invalidRequest("events_requested must be an array of event type URIs.")
        }
        let description = body["description"] as? String
        guard
            let stream = await provider.sharedSignals.create(
                clientId: client.clientId, eventsRequested: requested, description: description)
        else {
            throw SharedSignalsError(
                status: .conflict, err: "conflict",
                description: "The client has a stream already; read it with GET \(Self.streamsPath).")
        }
        provider.logger.info(
            "ssf stream created",
            metadata: ["client": "\(client.clientId)", "stream": "\(stream.id)", "events": "\(stream.eventsDelivered)"])
        return JSONBody.response(configuration(stream), status: .created)
    }

    private func read(_ request: Request, client: ClientRegistration) async throws -> Response {
        if let id = request.queryParameters.nonEmpty("stream_id") {
            return JSONBody.response(configuration(try await ownStream(id, client: client)))
        }
        return JSONBody.response(await provider.sharedSignals.streams(of: client.clientId).map(configuration))
    }

    private func delete(_ request: Request, client: ClientRegistration) async throws -> Response {
        guard let id = request.queryParameters.nonEmpty("stream_id") else {
            throw SharedSignalsError.invalidRequest("The stream_id query parameter is required.")
        }
        _ = try await ownStream(id, client: client)
        _ = await provider.sharedSignals.delete(id)
        provider.logger.info("ssf stream deleted", metadata: ["client": "\(client.clientId)", "stream": "\(id)"])
        return Response(status: .noContent)
    }

    /// The client's stream named `id`, or its only stream when `id` is nil; 404 otherwise, also
    /// for another client's stream, whose existence is none of its business.
    private func ownStream(_ id: String?, client: ClientRegistration) async throws -> SharedSignals.Stream {
        let stream: SharedSignals.Stream?
        if let id, !id.isEmpty {
            stream = await provider.sharedSignals.stream(id)
        } else {
            stream = await provider.sharedSignals.streams(of: client.clientId).first
        }
        guard let stream, stream.clientId == client.clientId else {
            throw SharedSignalsError.notFound("No such stream.")
        }
        return stream
    }

    func configuration(_ stream: SharedSignals.Stream) -> [String: Any] {
        var object: [String: Any] = [
            "stream_id": stream.id,
            "iss": provider.endpoints.issuer,
            "aud": stream.clientId,
            "delivery": [
                "method": Self.pollMethod, "endpoint_url": provider.endpoints.url(Self.pollPath + "/" + stream.id),
            ],
            "events_supported": SecurityEventType.supportedURIs,
            "events_requested": stream.eventsRequested,
            "events_delivered": stream.eventsDelivered,
        ]
        if let description = stream.description { object["description"] = description }
        return object
    }

    static func status(_ stream: SharedSignals.Stream) -> [String: Any] {
        var object: [String: Any] = ["stream_id": stream.id, "status": stream.status.rawValue]
        if let reason = stream.reason { object["reason"] = reason }
        return object
    }

    /// SSF §8.1.2.2: a receiver may pause, disable or enable its own stream.
    private func updateStatus(_ request: Request, client: ClientRegistration) async throws -> Response {
        let body = try await Self.jsonObject(request)
        let stream = try await ownStream(body["stream_id"] as? String, client: client)
        guard let name = body["status"] as? String, let status = SharedSignals.Status(rawValue: name) else {
            throw SharedSignalsError.invalidRequest("status must be enabled, paused or disabled.")
        }
        let changed = await provider.sharedSignals.setStatus(status, reason: body["reason"] as? String, id: stream.id)
        return JSONBody.response(changed.first.map(Self.status) ?? Self.status(stream))
    }

    // MARK: - Verification and polling

    /// SSF §8.1.4.2: queues a verification event carrying the receiver's `state`.
    private func verify(_ request: Request, client: ClientRegistration) async throws -> Response {
        let body = try await Self.jsonObject(request)
        let stream = try await ownStream(body["stream_id"] as? String, client: client)
        let event = SecurityEventPayload(state: body["state"] as? String)
        _ = try await SecurityEventTransmitter(provider: provider).queue(
            [SecurityEventType.verificationURI: event], subject: .opaque(stream.id), on: stream)
        return Response(status: .noContent)
    }

    /// RFC 8936 §2.4: acknowledgements and errors in, SETs out.
    private func poll(_ request: Request, streamId: String, client: ClientRegistration) async throws -> Response {
        let body = try await Self.jsonObject(request, emptyAllowed: true)
        guard let stream = await provider.sharedSignals.stream(streamId), stream.clientId == client.clientId else {
            throw SharedSignalsError.notFound("No such stream.")
        }
        guard let acks = (body["ack"] ?? [String]()) as? [String] else {
            throw SharedSignalsError.invalidRequest("ack must be an array of jti values.")
        }
        guard let errors = (body["setErrs"] ?? [String: Any]()) as? [String: Any] else {
            throw SharedSignalsError.invalidRequest("setErrs must be an object keyed by jti.")
        }
        let maxEvents = body["maxEvents"] as? Int
        for (jti, error) in errors {
            let code = (error as? [String: Any])?["err"] as? String ?? "(none)"
            provider.logger.notice("ssf receiver reported an error", metadata: ["jti": "\(jti)", "err": "\(code)"])
        }
        guard
            let result = await provider.sharedSignals.poll(
                streamId, acknowledging: Set(acks).union(errors.keys), maxEvents: maxEvents)
        else {
            throw SharedSignalsError.notFound("No such stream.")
        }
        provider.logger.info(
            "ssf poll",
            metadata: [
                "stream": "\(streamId)", "delivered": "\(result.sets.count)", "acked": "\(result.acked)",
                "status": "\(stream.status.rawValue)",
            ])
        var sets: [String: String] = [:]
        for set in result.sets { sets[set.jti] = set.jws }
        return JSONBody.response(
            ["sets": sets, "moreAvailable": result.moreAvailable], headers: [.cacheControl: "no-store"])
    }

    /// The request body as a JSON object; `emptyAllowed` takes an empty body as `{}`.
    static func jsonObject(_ request: Request, emptyAllowed: Bool = false) async throws -> [String: Any] {
        let buffer = try await request.body.collect(upTo: 1 << 20)
        if emptyAllowed, buffer.readableBytes == 0 { return [:] }
        guard let object = try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView)) as? [String: Any]
        else {
            throw SharedSignalsError.invalidRequest("The body must be a JSON object.")
        }
        return object
    }
}

/// Makes and queues SETs: signed with the provider's key, one event each, for each stream that
/// requested the event.
struct SecurityEventTransmitter: Sendable {
    let provider: Provider

    /// Queues `type` about `user` on every stream that requested it; returns the `jti`s queued.
    func publish(
        _ type: SecurityEventType, about user: UserAccount, forgery: SecurityEventForgery = .none,
        at date: Date = Date()
    ) async throws -> [String] {
        guard provider.offers(.sharedSignals) else { return [] }
        let subject = SubjectIdentifier.user(user.username, tenant: user.tenantId ?? provider.users.tenantId)
        var queued: [String] = []
        for stream in await provider.sharedSignals.recipients(of: type.uri) {
            if forgery == .replay {
                if let replayed = await provider.sharedSignals.replayLast(on: stream.id) { queued.append(replayed.jti) }
                continue
            }
            let events = [type.uri: SecurityEventPayload.admin(type, at: date)]
            if let jti = try await queue(events, subject: subject, on: stream, forgery: forgery) { queued.append(jti) }
        }
        if !queued.isEmpty {
            provider.logger.info(
                "ssf events queued",
                metadata: [
                    "event": "\(type.rawValue)", "user": "\(user.username)", "streams": "\(queued.count)",
                    "forgery": "\(forgery.rawValue)",
                ])
        }
        return queued
    }

    /// Signs one SET for `stream` and queues it; returns its `jti`, or nil when the stream no
    /// longer takes events.
    func queue(
        _ events: [String: SecurityEventPayload], subject: SubjectIdentifier, on stream: SharedSignals.Stream,
        forgery: SecurityEventForgery = .none
    ) async throws -> String? {
        let now = Int(Date().timeIntervalSince1970)
        var claims = SecurityEventClaims(
            iss: provider.endpoints.issuer, aud: stream.clientId, iat: now, jti: UUID().uuidString.lowercased(),
            sub_id: subject, events: events)
        switch forgery {
        case .wrongAudience: claims.aud = "00000000-0000-0000-0000-00000000f0e1"
        case .wrongIssuer: claims.iss = "https://impostor.example/\(provider.users.tenantId)/v2.0"
        case .expired: claims.iat = now - 2 * 24 * 3600
        case .none, .wrongKey, .replay: break
        }
        let typ = "secevent+jwt"
        let jws =
            forgery == .wrongKey
            ? try await provider.keys.signWithImpostorKey(claims, typ: typ)
            : try await provider.keys.sign(claims, typ: typ)
        let queued = await provider.sharedSignals.enqueue(.init(jti: claims.jti, jws: jws), on: stream.id)
        return queued ? claims.jti : nil
    }
}
