import Testing

@testable import HTTP

/// Runs `body` against a fresh loopback server, stopped afterwards.
func withServer<T>(
    _ handler: @escaping @Sendable (ReceivedRequest) -> Reply = { .echo($0) },
    _ body: (LoopbackServer) async throws -> T
) async throws -> T {
    let server = try LoopbackServer(handler)
    defer { server.stop() }
    return try await body(server)
}

/// The error `send` throws, or nil if it returned.
func sendError(_ client: HTTPClient, _ request: HTTPRequest) async -> HTTPError? {
    do {
        _ = try await client.send(request)
        return nil
    } catch {
        return error
    }
}

@Suite("HTTPClient against a loopback server")
struct HTTPClientTests {
    let client = HTTPClient.shared

    @Test func getReturnsStatusHeadersAndBody() async throws {
        try await withServer({ request in
            .respond(
                status: 200,
                headers: [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("X-Custom-Thing", "  Abc  "),
                    ("Set-Cookie", "a=1"),
                    ("Set-Cookie", "b=2"),
                    ("X-Empty", ""),
                ], body: Array("hello \(request.target)".utf8))
        }) { server in
            let response = try await client.send(
                .get("\(server.base)/hello?x=1&y=%20", headers: [HTTPHeader("Accept", "text/plain")]))
            #expect(response.status == 200)
            #expect(response.isSuccess)
            #expect(response.bodyText == "hello /hello?x=1&y=%20")
            #expect(response.header("CONTENT-TYPE") == "text/plain; charset=utf-8")
            #expect(response.header("x-custom-thing") == "Abc")
            #expect(response.header("x-empty") == "")
            #expect(response.header("missing") == nil)
            #expect(response.headers.allSatisfy { $0.name == $0.name.lowercased() })
            #expect(response.headers.filter { $0.name == "set-cookie" }.map(\.value) == ["a=1", "b=2"])
            #expect(response.headers.first?.name == "content-type")
            #expect(response.effectiveURL.hasPrefix(server.base))
            #expect(response.totalTime > .zero)

            let seen = try #require(server.received.first)
            #expect(seen.method == "GET")
            #expect(seen.target == "/hello?x=1&y=%20")
            #expect(seen.header("accept") == "text/plain")
            #expect(seen.header("user-agent") == "shared-device-broker")
            #expect(seen.body.isEmpty)
        }
    }

    @Test func postFormSendsPercentEncodedBody() async throws {
        try await withServer { server in
            let request = HTTPRequest.postForm(
                "\(server.base)/token?tenant=a",
                fields: [
                    ("grant_type", "authorization_code"),
                    ("code", "a b&c=d/é~+*"),
                    ("redirect_uri", "http://localhost:8080/cb?x=y"),
                ], headers: [HTTPHeader("Authorization", "Basic Y2xpZW50OnNlY3JldA==")])
            let response = try await client.send(request)
            #expect(response.status == 200)
            #expect(response.header("x-echo-method") == "POST")
            #expect(response.header("x-echo-target") == "/token?tenant=a")
            #expect(response.header("x-echo-content-type") == "application/x-www-form-urlencoded")
            let expected =
                "grant_type=authorization_code&code=a%20b%26c%3Dd%2F%C3%A9~%2B%2A"
                + "&redirect_uri=http%3A%2F%2Flocalhost%3A8080%2Fcb%3Fx%3Dy"
            #expect(response.bodyText == expected)

            let seen = try #require(server.received.first)
            #expect(seen.bodyText == expected)
            #expect(seen.header("content-length") == String(expected.utf8.count))
            #expect(seen.header("authorization") == "Basic Y2xpZW50OnNlY3JldA==")
            #expect(seen.header("expect") == nil)
            #expect(seen.headers.filter { $0.name.lowercased() == "content-type" }.count == 1)
        }
    }

    @Test func otherMethodsAndRawBodies() async throws {
        try await withServer { server in
            let put = try await client.send(
                HTTPRequest(
                    method: "PUT", url: "\(server.base)/p", headers: [HTTPHeader("Content-Type", "application/json")],
                    body: Array("{\"a\":1}".utf8)))
            #expect(put.header("x-echo-method") == "PUT")
            #expect(put.header("x-echo-content-type") == "application/json")
            #expect(put.bodyText == "{\"a\":1}")
            let delete = try await client.send(HTTPRequest(method: "DELETE", url: "\(server.base)/d"))
            #expect(delete.header("x-echo-method") == "DELETE")
            let emptyPost = try await client.send(HTTPRequest(method: "POST", url: "\(server.base)/e"))
            #expect(emptyPost.header("x-echo-method") == "POST")
            #expect(emptyPost.body.isEmpty)
            let head = try await client.send(HTTPRequest(method: "HEAD", url: "\(server.base)/h"))
            #expect(head.status == 200)
            #expect(head.body.isEmpty)
            #expect(server.received.map(\.method) == ["PUT", "DELETE", "POST", "HEAD"])
        }
    }

    @Test(arguments: [404, 500])
    func errorStatusesAreResponses(status: Int) async throws {
        try await withServer({ _ in .respond(status: status, body: Array("nope".utf8)) }) { server in
            let response = try await client.send(.get("\(server.base)/x"))
            #expect(response.status == status)
            #expect(!response.isSuccess)
            #expect(response.bodyText == "nope")
        }
    }

    @Test func redirectsAreNotFollowed() async throws {
        try await withServer({ _ in .respond(status: 302, headers: [("Location", "http://127.0.0.1:1/elsewhere")]) }) {
            server in
            let response = try await client.send(.get("\(server.base)/r"))
            #expect(response.status == 302)
            #expect(response.header("location") == "http://127.0.0.1:1/elsewhere")
            #expect(server.received.count == 1)
        }
    }

    @Test func connectionRefused() async throws {
        let error = await sendError(client, .get("http://127.0.0.1:\(closedPort())/x"))
        guard case .couldNotConnect(let detail)? = error else {
            Issue.record("expected couldNotConnect, got \(String(describing: error))")
            return
        }
        #expect(detail.contains("GET http://127.0.0.1:"))
    }

    @Test func unresolvableHost() async throws {
        let error = await sendError(client, .get("http://nonexistent-host.invalid/x"))
        #expect(error == .couldNotResolve(host: "nonexistent-host.invalid"))
    }

    @Test func slowServerTimesOut() async throws {
        try await withServer({ _ in .respond(status: 200, delay: .seconds(10)) }) { server in
            var request = HTTPRequest.get("\(server.base)/slow")
            request.timeout = .milliseconds(300)
            // Timed on a dedicated thread: see DedicatedExecutor.swift for why not the global pool.
            let (error, elapsed) = await onDedicatedThread {
                let clock = ContinuousClock()
                let start = clock.now
                let error = await sendError(client, request)
                return (error, clock.now - start)
            }
            #expect(error == .timedOut(.milliseconds(300)))
            #expect(elapsed < .seconds(3))
            #expect(elapsed >= .milliseconds(250))
        }
    }

    @Test func serverClosingWithoutAnswerIsATransportError() async throws {
        try await withServer({ _ in .close }) { server in
            let error = await sendError(client, .get("\(server.base)/close"))
            guard case .transport(let code, _)? = error else {
                Issue.record("expected transport error, got \(String(describing: error))")
                return
            }
            #expect(code == 52)  // CURLE_GOT_NOTHING
        }
    }

    @Test func bodyOverTheLimitWithContentLength() async throws {
        try await withServer({ _ in .respond(status: 200, body: [UInt8](repeating: 65, count: 2 << 20)) }) { server in
            let error = await sendError(client, .get("\(server.base)/big"))
            #expect(error == .responseTooLarge(limit: 1 << 20))
        }
    }

    @Test func bodyOverTheLimitWithoutContentLength() async throws {
        try await withServer({ _ in .stream(total: 8 << 20) }) { server in
            var request = HTTPRequest.get("\(server.base)/stream")
            request.maxResponseBytes = 100_000
            let error = await sendError(client, request)
            #expect(error == .responseTooLarge(limit: 100_000))
        }
    }

    @Test func bodyExactlyAtTheLimitIsAccepted() async throws {
        try await withServer({ _ in .stream(total: 5000) }) { server in
            var request = HTTPRequest.get("\(server.base)/stream")
            request.maxResponseBytes = 5000
            let response = try await client.send(request)
            #expect(response.body.count == 5000)
        }
    }

    @Test func bodyExactlyAtTheLimitWithContentLength() async throws {
        try await withServer({ _ in .respond(status: 200, body: [UInt8](repeating: 66, count: 4096)) }) { server in
            var request = HTTPRequest.get("\(server.base)/exact")
            request.maxResponseBytes = 4096
            let response = try await client.send(request)
            #expect(response.body.count == 4096)
            request.maxResponseBytes = 4095
            #expect(await sendError(client, request) == .responseTooLarge(limit: 4095))
        }
    }

    @Test func veryLongTimeoutsStillWork() async throws {
        try await withServer { server in
            var request = HTTPRequest.get("\(server.base)/long")
            request.timeout = .seconds(Int64.max)
            request.connectTimeout = .seconds(Int64.max)
            let response = try await client.send(request)
            #expect(response.status == 200)
        }
    }

    @Test func fiftyConcurrentRequests() async throws {
        try await withServer({ request in
            .respond(
                status: 200, headers: [("X-Target", request.target)], body: Array("body-\(request.target)".utf8),
                delay: .milliseconds(50))
        }) { server in
            let results = try await withThrowingTaskGroup(of: (Int, HTTPResponse).self) { group in
                for index in 0..<50 {
                    group.addTask { [client] in
                        (index, try await client.send(.get("\(server.base)/item/\(index)")))
                    }
                }
                var all: [(Int, HTTPResponse)] = []
                for try await result in group { all.append(result) }
                return all
            }
            #expect(results.count == 50)
            for (index, response) in results {
                #expect(response.status == 200)
                #expect(response.header("x-target") == "/item/\(index)")
                #expect(response.bodyText == "body-/item/\(index)")
            }
            #expect(server.received.count == 50)
        }
    }

    @Test func cancellationAbortsASlowRequest() async throws {
        try await withServer({ _ in .respond(status: 200, delay: .seconds(10)) }) { server in
            // Timed on a dedicated thread: see DedicatedExecutor.swift for why not the global pool.
            try await onDedicatedThread {
                let task = Task(executorPreference: DedicatedThreadExecutor.shared) { [client] in
                    await sendError(client, .get("\(server.base)/slow"))
                }
                // Cancel a running transfer: once the server holds the request, not after a guessed sleep.
                let running = await server.wait(within: .seconds(10)) { !$0.received.isEmpty }
                try #require(running, "the request never reached the server")
                let clock = ContinuousClock()
                let cancelledAt = clock.now
                task.cancel()
                let error = await task.value
                let elapsed = clock.now - cancelledAt
                #expect(error == .cancelled)
                #expect(elapsed < .seconds(1), "the cancellation took \(elapsed)")
                // Only the cancelled transfer may leave; when libcurl closes its connection is
                // libcurl's affair (the server saw it within 5 s in most runs, not in all).
                #expect(server.clientsGoneDuringDelay <= 1)
            }
        }
    }

    /// What a process about to exit needs: stop ends the transfer in flight as cancelled, returns
    /// once the worker is gone, and a later request fails at once without libcurl.
    @Test func stopEndsTransfersAndTheWorker() async throws {
        let own = HTTPClient(userAgent: "stop-test")
        try await withServer({ _ in .respond(status: 200, delay: .seconds(10)) }) { server in
            let running = Task { await sendError(own, .get("\(server.base)/slow")) }
            let started = await server.wait(within: .seconds(10)) { !$0.received.isEmpty }
            try #require(started, "the request never reached the server")
            await own.stop()
            #expect(await running.value == .cancelled)
            let after = await sendError(own, .get("\(server.base)/after"))
            #expect("\(String(describing: after))".contains("shut down"), "\(String(describing: after))")
            #expect(server.received.count == 1, "a request went out after the stop")
        }
        // A client never used has no worker: stop returns at once.
        await HTTPClient(userAgent: "unused").stop()
    }

    /// With 20 slow transfers in flight on one worker, a request with a short total timeout and a
    /// cancelled one still end promptly. Timed on a dedicated thread (see DedicatedExecutor.swift).
    /// The cancellation comes last, when libcurl has no timer due soon (long connect timeouts), so
    /// only the worker's wake-up can make it prompt.
    @Test func cancellationAndTimeoutAreTimelyAmongManySlowTransfers() async throws {
        let own = HTTPClient(userAgent: "concurrency-test")
        try await withServer({ _ in .respond(status: 200, delay: .seconds(20)) }) { server in
            func request(_ path: String, timeout: Duration = .seconds(30)) -> HTTPRequest {
                var request = HTTPRequest.get("\(server.base)\(path)")
                request.connectTimeout = .seconds(30)
                request.timeout = timeout  // every wait below is bounded by some request's timeout
                return request
            }
            try await onDedicatedThread {
                let executor = DedicatedThreadExecutor.shared
                let slow = (0..<20).map { index in
                    Task(executorPreference: executor) { await sendError(own, request("/slow/\(index)")) }
                }
                let doomed = Task(executorPreference: executor) { await sendError(own, request("/cancel")) }
                let allRunning = await server.wait(within: .seconds(10)) { $0.received.count == 21 }
                try #require(allRunning, "only \(server.received.count) of 21 requests reached the server")
                let clock = ContinuousClock()

                // A short total timeout fires on time, however many transfers are waiting.
                let timedStart = clock.now
                let timedError = await sendError(own, request("/timeout", timeout: .milliseconds(500)))
                let timedElapsed = clock.now - timedStart
                #expect(timedError == .timedOut(.milliseconds(500)))
                #expect(timedElapsed >= .milliseconds(450))
                #expect(timedElapsed < .seconds(5), "a 500 ms timeout took \(timedElapsed)")

                // A cancellation is acted on at once, however many transfers are waiting.
                let cancelledAt = clock.now
                doomed.cancel()
                let cancelError = await doomed.value
                let cancelElapsed = clock.now - cancelledAt
                #expect(cancelError == .cancelled)
                #expect(cancelElapsed < .seconds(5), "the cancellation took \(cancelElapsed)")

                // The slow transfers were left alone: at most the timed-out and the cancelled one
                // have left (the server may notice those late under load; it never sees more).
                #expect(server.clientsGoneDuringDelay <= 2)
                for task in slow { task.cancel() }
                for task in slow { #expect(await task.value == .cancelled) }
            }
        }
    }

    @Test func alreadyCancelledTaskDoesNotSend() async throws {
        try await withServer { server in
            let task = Task { [client] in
                withUnsafeCurrentTask { $0?.cancel() }
                return await sendError(client, .get("\(server.base)/never"))
            }
            #expect(await task.value == .cancelled)
            try await Task.sleep(for: .milliseconds(100))
            #expect(server.received.isEmpty)
        }
    }

    @Test(arguments: ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://example.com/", "FILE:///etc/hosts"])
    func nonHTTPSchemesAreRejected(url: String) async {
        let error = await sendError(client, .get(url))
        guard case .unsupportedScheme(let scheme)? = error else {
            Issue.record("expected unsupportedScheme, got \(String(describing: error))")
            return
        }
        #expect(scheme == String(url.prefix(while: { $0 != ":" })).lowercased())
    }

    @Test(arguments: ["not a url", "127.0.0.1/x", "http://", "http:///path", "http://exa mple.com/", "://x"])
    func invalidURLsAreRejected(url: String) async {
        let error = await sendError(client, .get(url))
        guard case .invalidURL? = error else {
            Issue.record("expected invalidURL for \(url), got \(String(describing: error))")
            return
        }
    }

    @Test func headerInjectionIsRejected() async throws {
        try await withServer { server in
            let bad = [
                HTTPRequest.get(
                    "\(server.base)/", headers: [HTTPHeader("Authorization", "Bearer s3cr3t\r\nX-Evil: 1")]),
                HTTPRequest.get("\(server.base)/", headers: [HTTPHeader("Bad Name", "v")]),
                HTTPRequest(method: "GET /x HTTP/1.1\r\n", url: "\(server.base)/"),
            ]
            for request in bad {
                let error = await sendError(client, request)
                guard case .invalidRequest? = error else {
                    Issue.record("expected invalidRequest, got \(String(describing: error))")
                    continue
                }
                #expect(!(error?.description.contains("s3cr3t") ?? true))
            }
            #expect(server.received.isEmpty)
        }
    }

    @Test func tlsToAPlainServerFailsAsTLS() async throws {
        try await withServer({ _ in .respond(status: 200) }) { server in
            let error = await sendError(client, .get("https://127.0.0.1:\(server.port)/"))
            guard case .tls? = error else {
                Issue.record("expected tls, got \(String(describing: error))")
                return
            }
            // The server is plain HTTP: the advice says so, and does not send the person to certificates.
            let text = error?.description ?? ""
            #expect(text.contains("plain HTTP") && !text.contains("trust store"), "\(text)")
        }
    }

    @Test func errorDescriptionsNeverCarrySecrets() async throws {
        let secrets = ["s3cr3t-body", "s3cr3t-token", "s3cr3t-query", "s3cr3t-pass", "s3cr3t-fragment"]
        func request(_ base: String) -> HTTPRequest {
            var request = HTTPRequest.postForm(
                "\(base)/token?code=s3cr3t-query#s3cr3t-fragment",
                fields: [("client_secret", "s3cr3t-body")],
                headers: [HTTPHeader("Authorization", "Bearer s3cr3t-token")])
            request.timeout = .milliseconds(300)
            return request
        }
        var errors: [HTTPError] = []
        let refused = "http://user:s3cr3t-pass@127.0.0.1:\(closedPort())"
        errors += [await sendError(client, request(refused))].compactMap { $0 }
        errors += [await sendError(client, request("http://user:s3cr3t-pass@nonexistent-host.invalid"))].compactMap {
            $0
        }
        errors += [await sendError(client, request("ftp://user:s3cr3t-pass@127.0.0.1"))].compactMap { $0 }
        try await withServer({ request in
            request.target.hasPrefix("/token") && request.header("x-mode") == "slow"
                ? .respond(status: 200, delay: .seconds(5))
                : .respond(status: 200, body: [UInt8](repeating: 0, count: 4096))
        }) { server in
            let base = "http://user:s3cr3t-pass@127.0.0.1:\(server.port)"
            var slow = request(base)
            slow.headers.append(HTTPHeader("X-Mode", "slow"))
            errors += [await sendError(client, slow)].compactMap { $0 }
            var small = request(base)
            small.maxResponseBytes = 10
            errors += [await sendError(client, small)].compactMap { $0 }
            errors += [await sendError(client, request("https://user:s3cr3t-pass@127.0.0.1:\(server.port)"))].compactMap
            { $0 }
        }
        #expect(errors.count == 6)
        for error in errors {
            let texts = [error.description, String(describing: error), String(reflecting: error), "\(error)"]
            for text in texts {
                for secret in secrets {
                    #expect(!text.contains(secret), "\(text) leaks \(secret)")
                }
            }
        }
        if case .couldNotConnect(let detail) = errors[0] {
            #expect(detail.hasPrefix("POST http://127.0.0.1:"))
            #expect(detail.contains("/token:"))
        } else {
            Issue.record("expected couldNotConnect first, got \(errors[0])")
        }
    }

    @Test func separateClientsWorkAndShutDown() async throws {
        try await withServer { server in
            for _ in 0..<3 {
                let own = HTTPClient(userAgent: "test-agent/1.0\r\nX-Evil: 1")
                let response = try await own.send(.get("\(server.base)/ua"))
                #expect(response.status == 200)
            }
            #expect(
                server.received.map { $0.header("user-agent") } == Array(repeating: "test-agent/1.0X-Evil: 1", count: 3)
            )
            #expect(server.received.allSatisfy { $0.header("x-evil") == nil })
        }
    }

    /// Idle, a client lets libcurl and its thread go; the next request starts them again, and a
    /// stop after a release returns at once.
    @Test func anIdleClientReleasesLibcurlAndComesBack() async throws {
        let client = HTTPClient(idleRelease: .milliseconds(200))
        try await withServer { server in
            #expect(try await client.send(.get("\(server.base)/one")).status == 200)
            // The release is the worker's own timer; waited for, bounded, without a readiness line to wait on.
            var released = false
            for _ in 0..<300 where !released {
                try await Task.sleep(for: .milliseconds(10))
                released = !client.workerRunning
            }
            #expect(released, "the worker still runs after 3 s idle")
            #expect(try await client.send(.get("\(server.base)/two")).status == 200)
            #expect(server.received.map(\.target) == ["/one", "/two"])
        }
        await client.stop()
    }
}
