import BrokerCore

/// No provider: these tests change the state without one.
struct UnreachableProvider: IdentityProvider {
    var authority: String { "https://login.example/t/v2.0" }
    private var down: BrokerFailure { BrokerFailure(.serverUnavailable, "unreachable") }
    func signInWithPassword(clientId: String, username: String, password: String, scopes: Scopes) async throws
        -> ProviderTokens
    { throw down }
    func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    { throw down }
    func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome { throw down }
    func startCodeSignIn(clientId: String, username: String) async throws -> CodeChallenge { throw down }
    func resendCode(clientId: String, continuationToken: String) async throws -> CodeChallenge { throw down }
    func submitCode(clientId: String, continuationToken: String, code: String, scopes: Scopes) async throws
        -> ProviderTokens
    { throw down }
    func signInInteractively(clientId: String, scopes: Scopes, request: InteractiveRequest) async throws
        -> ProviderTokens
    { throw down }
    func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome { throw down }
    func startDeviceSignIn(clientId: String, scopes: Scopes) async throws -> DeviceAuthorizationGrant { throw down }
    func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> DeviceCodePoll {
        throw down
    }
    func signInFlows() async throws -> [SignInFlow] { throw down }
    func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism> { throw down }
    var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? { nil }
    func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    { throw down }
    func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws -> ProviderTokens
    { throw down }
    func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens {
        throw down
    }
}

struct FixedClock: WallClock {
    func now() -> Int64 { 1_800_000_000 }
}

/// A store that keeps nothing: for tests of what happens around a change, not of its file.
struct DiscardingStore: StateStore {
    func load() throws -> BrokerState? { nil }
    func save(_ state: BrokerState) throws {}
}
