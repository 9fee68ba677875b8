import Hummingbird

struct NativeAuthRoutes: Sendable {
    let provider: Provider
    func register(on router: Router<BasicRequestContext>) {}
    func passwordGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        throw OAuthError.invalidRequest("not implemented")
    }
    func oobGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        throw OAuthError.invalidRequest("not implemented")
    }
}
