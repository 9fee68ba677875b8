import DBus
import Locking

/// A sign-in waiting for the one-time code the provider sent (by email): what
/// ``PublicClientApplication/signIn(username:scopes:)`` returns. In the shape of MSAL's native
/// authentication `SignInCodeRequiredState`, with async/await instead of delegates.
///
/// ```swift
/// let state = try await app.signIn(username: "alice@contoso.example", scopes: ["User.Read"])
/// print("Enter the \(state.codeLength)-digit code sent to \(state.sentTo)")
/// let result = try await state.submitCode(readLine() ?? "")
/// ```
///
/// The flow lives in the broker and belongs to this application object's bus connection: it
/// ends with ``submitCode(_:)``'s success, ``cancel()``, or when the app leaves the bus.
public final class SignInCodeRequiredState: Sendable {
    /// The broker's name for this flow.
    public let flowId: String
    private let link: BusLink
    private let configuration: BrokerClientConfiguration
    private let latest: Locked<CodeChallenge>

    init(flowId: String, challenge: CodeChallenge, link: BusLink, configuration: BrokerClientConfiguration) {
        self.flowId = flowId
        self.link = link
        self.configuration = configuration
        latest = Locked(challenge)
    }

    /// The latest challenge (``resendCode()`` replaces it).
    public var challenge: CodeChallenge { latest.withLock { $0 } }
    /// The masked address the code went to, e.g. `a***@c***.example`.
    public var sentTo: String { challenge.sentTo }
    /// How many characters the code has.
    public var codeLength: Int { challenge.codeLength }
    /// How the code travels, e.g. `email`.
    public var channel: String { challenge.channel }

    /// Sends the code the person typed. A wrong code throws ``BrokerError/invalidCode(_:)`` and
    /// the state stays usable: ask again. An expired one throws ``BrokerError/codeExpired(_:)``:
    /// call ``resendCode()``.
    public func submitCode(_ code: String) async throws(BrokerError) -> TokenResult {
        try await link.submitCode(flowId: flowId, code: code, timeout: configuration.tokenTimeout).result
    }

    /// Asks the provider to send a new code; ``challenge`` then describes it.
    public func resendCode() async throws(BrokerError) {
        let challenge = try await link.resendCode(flowId: flowId, timeout: configuration.tokenTimeout).challenge
        latest.withLock { $0 = challenge }
    }

    /// Ends the flow in the broker. Best effort: a flow that already ended is not an error.
    public func cancel() async {
        _ = try? await link.cancelSignIn(flowId: flowId, timeout: configuration.queryTimeout)
    }
}
