import BrokerCore

/// The provider of a brokerd started before anyone configured one (a fresh install, activated by
/// the first app that asks): device mode, device information and the accounts are served, and
/// everything that needs a provider gets `NotConfigured`, naming the file to edit. A start that
/// failed instead would reach the app only as the bus's "exited with status 64".
struct UnconfiguredProvider: IdentityProvider, SignInRefusingProvider {
    /// What an administrator does about it.
    static let remedy =
        "no identity provider is configured on this device: the administrator sets \"authority\" (the "
        + "provider's issuer URL) in \(DaemonConfigurationFile.administratorPath) (or starts brokerd with "
        + "--authority URL), then restarts the broker (systemctl --user restart shared-device-broker)"

    let authority = ""
    var singleSignOnSupportIfKnown: Set<SingleSignOnMechanism>? { [] }

    var signInRefusal: BrokerFailure { refuse() }
    private func refuse() -> BrokerFailure { BrokerFailure(.notConfigured, Self.remedy) }

    func refresh(clientId: String, refreshToken: String, scopes: Scopes, claims: String?) async throws
        -> ProviderTokens
    {
        throw refuse()
    }
    func revoke(clientId: String, token: RevocableToken) async throws -> EndpointOutcome { throw refuse() }
    func endBrowserSession(clientId: String, idTokenHint: String?) async throws -> EndpointOutcome { .notOffered }
    func signInFlows() async throws -> [SignInFlow] { throw refuse() }
    func singleSignOnSupport() async throws -> Set<SingleSignOnMechanism> { [] }
    func exchangeDeviceSecret(clientId: String, deviceSecret: DeviceSecret, scopes: Scopes) async throws
        -> ProviderTokens
    { throw refuse() }
    func redeemFamilyRefreshToken(clientId: String, refreshToken: String, scopes: Scopes) async throws
        -> ProviderTokens
    { throw refuse() }
    func exchangeToken(clientId: String, subject: SubjectToken, scopes: Scopes) async throws -> ProviderTokens {
        throw refuse()
    }
}
