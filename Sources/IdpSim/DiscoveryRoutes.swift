import Foundation
import Hummingbird

/// OpenID Connect Discovery 1.0 / RFC 8414 metadata and the JWKS (RFC 7517).
struct DiscoveryRoutes: Sendable {
    let provider: Provider

    func register(on router: Router<BasicRequestContext>) {
        let endpoints = provider.endpoints
        router.get(endpoints.discoveryRoute) { _, _ in
            await provider.stats.count("discovery")
            let (fault, replacement) = await FaultResponses.before(.discovery, provider: provider)
            if let replacement { return replacement }
            return FaultResponses.after(fault, JSONBody.response(document(), headers: [.cacheControl: "max-age=60"]))
        }
        router.get(endpoints.route(Endpoints.jwksPath)) { _, _ in
            await provider.stats.count("jwks")
            let (fault, replacement) = await FaultResponses.before(.jwks, provider: provider)
            if let replacement { return replacement }
            if fault.mode == .jwksWithoutKey {
                // A well-formed set that lacks the key tokens are signed with: another, fresh key.
                let other = try await SigningKeys.generate()
                return JSONBody.response(encoding: other.jwks, headers: [.cacheControl: "max-age=60"])
            }
            return FaultResponses.after(
                fault, JSONBody.response(encoding: provider.keys.jwks, headers: [.cacheControl: "max-age=60"]))
        }
    }

    func document() -> [String: Any] {
        let endpoints = provider.endpoints
        var document: [String: Any] = [
            "issuer": endpoints.issuer,
            "authorization_endpoint": endpoints.url(Endpoints.authorizePath),
            "token_endpoint": endpoints.url(Endpoints.tokenPath),
            "jwks_uri": endpoints.url(Endpoints.jwksPath),
            "userinfo_endpoint": endpoints.url(Endpoints.userinfoPath),
            "revocation_endpoint": endpoints.url(Endpoints.revokePath),
            "end_session_endpoint": endpoints.url(Endpoints.logoutPath),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token", "password", "client_credentials"],
            "subject_types_supported": ["pairwise"],
            "id_token_signing_alg_values_supported": [SigningKeys.algorithm],
            "scopes_supported": ["openid", "profile", "email", "offline_access", "User.Read"],
            "claims_supported": [
                "iss", "aud", "exp", "iat", "nbf", "sub", "oid", "tid", "preferred_username", "name", "email", "nonce",
                "auth_time", "ver",
            ],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "prompt_values_supported": ["none", "login", "select_account", "consent"],
            "tenant_region_scope": "NA",
            "tid": provider.users.tenantId,
        ]
        let without = provider.settings.without
        if without.contains(.revocation) {
            document["revocation_endpoint"] = nil
            document["revocation_endpoint_auth_methods_supported"] = nil
        }
        if without.contains(.endSession) { document["end_session_endpoint"] = nil }
        if endpoints.multiTenant {
            // As Entra's multi-tenant authority publishes it: no tenant of its own, no grant list.
            document["tid"] = nil
            document["grant_types_supported"] = nil
            document["tenant_region_scope"] = NSNull()
            document["cloud_instance_name"] = "microsoftonline.com"
        }
        if provider.offers(.nativeSSO) {
            document["native_sso_supported"] = true
            document["scopes_supported"] = ["openid", "profile", "email", "offline_access", "User.Read", "device_sso"]
        }
        if TokenExchange.offered(by: provider) {
            document["grant_types_supported"] = [
                "authorization_code", "refresh_token", "password", "client_credentials", TokenExchange.grantType,
            ]
        }
        if provider.offers(.deviceCode) {
            document["device_authorization_endpoint"] = endpoints.url(DeviceAuthorization.authorizationPath)
            if var grants = document["grant_types_supported"] as? [String] {
                grants.append(DeviceAuthorization.grantType)
                document["grant_types_supported"] = grants
            }
        }
        if provider.offers(.ciba) {
            document["backchannel_authentication_endpoint"] = endpoints.url(BackchannelAuthentication.authorizationPath)
            document["backchannel_token_delivery_modes_supported"] = ["poll"]
            document["backchannel_user_code_parameter_supported"] = false
            if var grants = document["grant_types_supported"] as? [String] {
                grants.append(BackchannelAuthentication.grantType)
                document["grant_types_supported"] = grants
            }
        }
        // Native authentication's email code is a grant of its own: said where grants are listed.
        if provider.offers(.nativeAuth), var grants = document["grant_types_supported"] as? [String] {
            grants.append("oob")
            document["grant_types_supported"] = grants
        }
        if without.contains(.grantTypes) { document["grant_types_supported"] = nil }
        return document
    }
}
