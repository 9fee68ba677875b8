import DBus
import Identity
import Logging

/// Opens pages through the desktop portal (`org.freedesktop.portal.OpenURI` on the session bus):
/// the desktop starts the person's browser, outside brokerd's sandbox and not as its child, and
/// may ask which browser to use. Where no portal answers, or it fails to open the page, the
/// `fallback` (`xdg-open` or `$BROWSER`) is tried.
struct DesktopPortal: URLOpener {
    static let busName = "org.freedesktop.portal.Desktop"
    static let objectPath = "/org/freedesktop/portal/desktop"

    let connection: DBusConnection
    let fallback: any URLOpener
    let logger: Logger
    /// How long the portal's answer (its `Response` signal) is awaited. A portal that shows a
    /// chooser answers when the person has chosen; after this the page is taken to be in their hands.
    var responseTimeout: Duration = .seconds(60)

    func open(_ url: String) async throws(IdentityError) {
        let outcome: Outcome
        do { outcome = try await openThroughPortal(url) } catch { outcome = .failed("\(error)") }
        let portalFailure: String
        switch outcome {
        case .opened: return
        case .declined: throw .cancelled
        case .failed(let why): portalFailure = why
        }
        logger.debug(
            "the desktop portal did not open the page; trying a browser command", metadata: ["why": "\(portalFailure)"])
        do { try await fallback.open(url) } catch .browserUnavailable(let why) {
            throw .browserUnavailable("the desktop portal: \(portalFailure); \(why)")
        }
    }

    private enum Outcome {
        case opened, declined
        case failed(String)
    }

    private func openThroughPortal(_ url: String) async throws -> Outcome {
        // The request object's path is known before the call (the handle_token convention), so the
        // subscription is in place before the portal can answer.
        let token = "shared_device_broker_\(UInt32.random(in: 0...UInt32.max))"
        let sender = String(connection.uniqueName.dropFirst().map { $0 == "." ? "_" : $0 })
        let requestPath = "\(Self.objectPath)/request/\(sender)/\(token)"
        let responses = try await connection.signals(matching: PortalRequest.Response.rule(sender: Self.busName))
        let handle: String
        do {
            handle = try await PortalOpenURI(connection, destination: Self.busName, path: Self.objectPath).openURI(
                parentWindow: "", uri: url, options: ["handle_token": .string(token)], timeout: .seconds(10)
            ).handle
        } catch is DesktopServiceMismatch {
            // A reply without the handle: the request's path is the one the convention gives.
            handle = requestPath
        } catch let error as DBusError {
            return .failed(error.name == DBusError.serviceUnknown().name ? "not on this bus" : "\(error.message)")
        }
        let response = await firstResponse(on: [requestPath, handle], in: responses)
        switch response {
        case nil:
            logger.info("the desktop portal has not answered yet; the page is taken to be open")
            return .opened
        case 0: return .opened
        case 1: return .declined
        case let code?: return .failed("it answered \(code) (the page could not be opened)")
        }
    }

    /// The `response` code of the first `Response` on one of `paths`, nil when none came in time.
    private func firstResponse(on paths: [String], in responses: AsyncStream<DBusSignal>) async -> UInt32? {
        await withTaskGroup(of: UInt32?.self) { group in
            group.addTask {
                for await signal in responses where paths.contains(signal.path) {
                    // One of another shape counts as a failure (2): the fallback is tried.
                    return (try? PortalRequest.Response(signal))?.response ?? 2
                }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: responseTimeout)  // a deadline, not a synchronization
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}
