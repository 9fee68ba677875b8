import Foundation
import HTTP
import SharedDeviceClient
import TestSupport

/// What the provider-fault tests need besides the shared environment: faults on any idp-sim
/// endpoint, its counters, the broker's state file, and a call measured while other callers are
/// served.
extension BrokerEnvironment {
    /// Sets idp-sim's fault on one endpoint (`POST /test/faults`); `endpoint` nil means the mode's
    /// default (the token endpoint, or the JWKS for `jwksWithoutKey`).
    func setFault(
        _ mode: String, endpoint: String? = nil, count: Int? = nil, delayMs: Int? = nil,
        retryAfter: Int? = nil, sizeBytes: Int? = nil
    ) async throws {
        var fields = ["\"mode\": \"\(mode)\""]
        if let endpoint { fields.append("\"endpoint\": \"\(endpoint)\"") }
        if let count { fields.append("\"count\": \(count)") }
        if let delayMs { fields.append("\"delayMs\": \(delayMs)") }
        if let retryAfter { fields.append("\"retryAfter\": \(retryAfter)") }
        if let sizeBytes { fields.append("\"sizeBytes\": \(sizeBytes)") }
        let body = "{" + fields.joined(separator: ", ") + "}"
        let request = HTTPRequest(
            method: "POST", url: idp.baseURL + "/test/faults",
            headers: [HTTPHeader("Content-Type", "application/json")], body: Array(body.utf8))
        let response = try await HTTPClient.shared.send(request)
        guard response.status == 200 else {
            throw ProcessFailure("setting the fault \(body) failed: \(response.status) \(response.bodyText)")
        }
    }

    /// Clears every fault on every endpoint.
    func clearFaults() async throws {
        try await setFault("none")
    }

    /// Zeroes idp-sim's counters.
    func resetStats() async throws {
        let response = try await HTTPClient.shared.send(.postForm(idp.baseURL + "/test/stats/reset", fields: []))
        guard response.status == 200 else { throw ProcessFailure("resetting the stats failed: \(response.status)") }
    }

    /// How many requests idp-sim counted for an endpoint other than the token endpoint (`discovery`, `jwks`, `revoke`,
    /// ...).
    func endpointRequests(_ name: String) async throws -> Int {
        try await idpStats()[name] as? Int ?? 0
    }

    /// The broker's state files (state.json and its journal), byte for byte (tokens included:
    /// the tests run brokerd with `--token-storage plaintext-file`).
    func stateBytes() throws -> [Data?] {
        StateOnDisk.bytes(in: stateDirectory)
    }

    /// How many times brokerd logged that it is retrying a provider request.
    var brokerRetries: Int {
        brokerd.process.stderrLines.filter { $0.contains("identity provider request failed; retrying") }.count
    }

    /// Stops idp-sim (SIGTERM, then waits for it to exit): the provider's port now refuses connections.
    func stopProvider() async throws {
        idp.process.signal(SIGTERM)
        let process = idp.process
        _ = try await offThePool { try process.waitForExit(timeout: .seconds(10)) }
    }

    /// Runs `brokerctl ARGS` while the provider misbehaves, and measures it. Once the call is
    /// known to be under way (`underWay`), another caller (a connection of its own, as app
    /// `probeClient`) asks the broker for the current account, the device information and, with
    /// `silentToken`, a token from the cache; their latencies are recorded. The probe client must
    /// have called GetCurrentAccount before, so the probe writes nothing.
    func faultedCall(
        _ arguments: [String], stdin: String? = nil, underWay: UnderWay = .faultApplied,
        probeClient: String = "mail-app", silentToken: Bool = false,
        timeout: Duration = .seconds(45)
    ) async throws -> FaultedCall {
        let idpMark = idp.process.stderrLines.count
        let brokerMark = brokerd.process.stderrLines.count
        let started = ContinuousClock.now
        let child = try ChildProcess(
            "brokerctl", executable: Binaries.path("brokerctl"),
            arguments: arguments + ["--address", bus.address], stdin: stdin)
        let idpProcess = idp.process
        let brokerProcess = brokerd.process
        switch underWay {
        case .faultApplied:
            try await offThePool {
                try idpProcess.waitForLine(after: idpMark, timeout: .seconds(15), stderr: true) {
                    $0.contains("fault applied")
                }
            }
        case .brokerRetrying:
            try await offThePool {
                try brokerProcess.waitForLine(after: brokerMark, timeout: .seconds(15), stderr: true) {
                    $0.contains("identity provider request failed; retrying")
                }
            }
        }
        let probes = try await probe(clientId: probeClient, silentToken: silentToken)
        let status = try await offThePool { try child.waitForExit(timeout: timeout) }
        let elapsed = ContinuousClock.now - started
        return FaultedCall(
            result: CommandResult(status: status, stdout: child.stdoutText, stderr: child.stderrText),
            elapsed: elapsed, probes: probes)
    }

    /// The latencies of GetCurrentAccount, GetDeviceInformation and (with `silentToken`) a
    /// silent token for `User.Read` from the cache, over a connection of their own.
    func probe(clientId: String = "mail-app", silentToken: Bool = false) async throws -> Probes {
        let app = try PublicClientApplication(
            clientId: clientId, configuration: BrokerClientConfiguration(busAddress: bus.address))
        let clock = ContinuousClock()
        var account: (current: Account?, previous: Account?)?
        let currentAccount = try await clock.measure { account = try await app.currentAccount() }
        let deviceInformation = try await clock.measure { _ = try await app.deviceInformation() }
        var token: String?
        let cachedToken =
            silentToken
            ? try await clock.measure {
                token = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"])).accessToken
            }
            : nil
        return Probes(
            currentAccount: currentAccount, deviceInformation: deviceInformation, cachedToken: cachedToken,
            username: account?.current?.username, accessToken: token)
    }
}

/// What tells a test that the faulted call is under way at the provider.
enum UnderWay {
    /// idp-sim logged that it applied the fault to a request.
    case faultApplied
    /// brokerd logged a retry (the provider is down, so it cannot say anything).
    case brokerRetrying
}

/// Another app's calls, timed while a faulted call was under way.
struct Probes {
    var currentAccount: Duration
    var deviceInformation: Duration
    /// The silent token from the cache, when asked for.
    var cachedToken: Duration?
    /// Who GetCurrentAccount said was signed in.
    var username: String?
    /// The access token the silent call returned.
    var accessToken: String?

    var slowest: Duration { max(currentAccount, deviceInformation, cachedToken ?? .zero) }
}

/// A brokerctl run against a misbehaving provider.
struct FaultedCall {
    var result: CommandResult
    var elapsed: Duration
    var probes: Probes

    /// The D-Bus error name brokerctl printed, e.g. `ServerUnavailable`.
    var errorName: String? {
        guard let range = result.stderr.range(of: "io.shareddevice.Broker1.Error.") else { return nil }
        return String(result.stderr[range.upperBound...].prefix { $0.isLetter })
    }

    /// `elapsed` in seconds with two decimals, for the figures the tests print.
    var seconds: String { String(format: "%.2f", elapsed.seconds) }
}

/// Prints one measured figure, for docs/reliability.md.
func figure(_ name: String, _ call: FaultedCall, attempts: Int? = nil) {
    let attemptText = attempts.map { ", provider saw \($0) attempt(s)" } ?? ""
    let token = call.probes.cachedToken.map { ", cached silent token \(ms($0))" } ?? ""
    print(
        "FIGURE \(name): \(call.errorName ?? "ok") after \(call.seconds) s\(attemptText); meanwhile "
            + "GetCurrentAccount \(ms(call.probes.currentAccount)), GetDeviceInformation "
            + "\(ms(call.probes.deviceInformation))\(token)"
            + (call.result.status == 0
                ? "" : "\n  MESSAGE \(call.result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))"))
}

func ms(_ duration: Duration) -> String { String(format: "%.0f ms", duration.seconds * 1000) }
