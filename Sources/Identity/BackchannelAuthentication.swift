import BrokerCore
import HTTP
import JSON

/// OpenID Connect CIBA (Client-Initiated Backchannel Authentication Core 1.0), poll mode: the
/// broker names the user (`login_hint`), the provider asks them on their own authentication
/// device to approve, and the broker polls the token endpoint with the request's id meanwhile.
extension OIDCProvider {
    static let cibaGrant = "urn:openid:params:grant-type:ciba"

    public func startPhoneApproval(clientId: String, loginHint: String, bindingMessage: String, scopes: Scopes)
        async throws -> PhoneApprovalRequest
    {
        try await requester.withBudget { () async throws(BrokerFailure) -> PhoneApprovalRequest in
            let endpoints = try await endpoints(for: .signIn(.ciba))
            guard let url = endpoints.backchannelAuthenticationEndpoint, endpoints.offersCIBAPollMode else {
                throw BrokerFailure(
                    .notSupported,
                    "the identity provider offers no approval on a phone (its discovery document names no "
                        + "backchannel_authentication_endpoint with the poll mode); sign in another way")
            }
            var request = HTTPRequest.postForm(
                url,
                fields: authenticated(
                    clientId,
                    [
                        ("scope", Self.scopeParameter(scopes, kind: .signIn(.ciba), endpoints: endpoints)),
                        ("login_hint", loginHint), ("binding_message", bindingMessage),
                    ]))
            addBasicAuthentication(clientId, to: &request)
            let response = try await send(
                request, kind: .signIn(.ciba), what: "the backchannel authentication request", replay: .oneTime)
            guard response.status == 200 else {
                throw Self.backchannelRefusal(Self.oauthError(response), loginHint: loginHint, host: host)
            }
            do throws(IdentityError) {
                return try Self.phoneApprovalRequest(response.body)
            } catch {
                throw error.brokerFailure(during: .signIn(.ciba), host: host)
            }
        }
    }

    /// CIBA Core 13's refusals of the request, in the person's terms; the rest as any request's.
    static func backchannelRefusal(_ error: IdentityError, loginHint: String, host: String) -> BrokerFailure {
        guard case .oauth(let status, let code, _, _, _) = error, status < 500 else {
            return error.brokerFailure(during: .signIn(.ciba), host: host)
        }
        switch code {
        case "unknown_user_id":
            return BrokerFailure(
                .userNotFound, "the identity provider knows no user \(loginHint) to ask for an approval (\(error))")
        case "access_denied":
            return BrokerFailure(.accessDenied, "the identity provider refused to ask \(loginHint) (\(error))")
        case "invalid_binding_message":
            return BrokerFailure(
                .serverError,
                "the identity provider refused the broker's binding message (\(error)); sign in another way, and "
                    + "tell the provider's administrator")
        case "missing_user_code", "invalid_user_code":
            return BrokerFailure(
                .notSupported,
                "the identity provider asks for a user code with every approval on a phone, which the broker does "
                    + "not send (\(error)); sign in another way")
        default:
            return error.brokerFailure(during: .signIn(.ciba), host: host)
        }
    }

    /// CIBA Core 7.3's fields; `expires_in` and `interval` bounded (a day; one second to five
    /// minutes, 5 s when absent) so no answer can make the broker poll in a tight loop or never.
    static func phoneApprovalRequest(_ body: [UInt8]) throws(IdentityError) -> PhoneApprovalRequest {
        let object = try JSONValue.providerObject(body, what: "the backchannel authentication answer")
        guard let id = object["auth_req_id"]?.string, !id.isEmpty else {
            throw IdentityError.badResponse("the backchannel authentication answer lacks auth_req_id")
        }
        return PhoneApprovalRequest(
            authRequestId: id, expiresIn: min(max(1, object["expires_in"]?.int64 ?? 120), 86_400),
            interval: min(max(1, object["interval"]?.int64 ?? 5), 300))
    }

    public func pollPhoneApproval(clientId: String, authRequestId: String, scopes: Scopes) async throws -> SignInPoll {
        try await requester.withBudget { () async throws(BrokerFailure) -> SignInPoll in
            // CIBA Core 10.1: the token request carries no scope; the request's was asked at the start.
            let (response, endpoints, _) = try await postGrant(
                .signIn(.ciba), clientId: clientId, scope: nil,
                fields: [("grant_type", Self.cibaGrant), ("auth_req_id", authRequestId)])
            if response.status != 200 {
                let error = Self.oauthError(response)
                if case .oauth(let status, let code, _, _, _) = error, status < 500 {
                    switch code {
                    case "authorization_pending": return .pending
                    case "slow_down": return .slowDown
                    case "access_denied":
                        throw BrokerFailure(.accessDenied, "the sign-in was denied on the phone")
                    case "expired_token":
                        throw BrokerFailure(
                            .codeExpired, "nobody approved the sign-in on the phone in time; start it again")
                    case "invalid_grant":
                        // The provider no longer knows the request (it ended, or was restarted):
                        // only a new request can go on.
                        throw BrokerFailure(
                            .codeExpired,
                            "the identity provider no longer knows this approval request (\(error)); start it again")
                    default: break
                    }
                }
                throw error.brokerFailure(during: .signIn(.ciba), host: host)
            }
            do throws(IdentityError) {
                return .tokens(
                    try await tokens(
                        from: response, clientId: clientId, scopes: scopes, nonce: nil, endpoints: endpoints))
            } catch {
                throw error.brokerFailure(during: .signIn(.ciba), host: host)
            }
        }
    }
}
