import Hummingbird

struct AuthorizeRoutes: Sendable {
    let provider: Provider
    func register(on router: Router<BasicRequestContext>) {}
    func codeGrant(_ parameters: [String: String], client: ClientRegistration) async throws -> SignIn {
        throw OAuthError.invalidRequest("not implemented")
    }
}
