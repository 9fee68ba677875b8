import BrokerCore

/// Stand-ins for the core's ports in the daemon's and the persistence layer's tests.

/// No provider: these tests change the state without one.
package struct UnreachableProvider: IdentityProvider, SignInRefusingProvider {
    package init() {}
    package var authority: String { "https://login.example/t/v2.0" }
    package var signInRefusal: BrokerFailure { down }
    private var down: BrokerFailure { BrokerFailure(.serverUnavailable, "unreachable") }
    package func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    { throw down }
    package func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome { throw down }
    package func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome {
        throw down
    }
    package func signInFlows() async throws -> [SignInFlow] { throw down }
    package func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism> { throw down }
    package var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? { nil }
    package func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    { throw down }
    package func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws
        -> ProviderTokens
    { throw down }
    package func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens {
        throw down
    }
}

package struct FixedClock: WallClock {
    package init() {}
    package func now() -> Int64 { 1_800_000_000 }
}

/// A store that keeps nothing: for tests of what happens around a change, not of its file.
package struct DiscardingStore: StateStore {
    package init() {}
    package func load() throws -> BrokerState? { nil }
    package func save(_ state: BrokerState, revoked: Set<String>) throws {}
}
