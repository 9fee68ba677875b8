import BrokerCore
import HTTP
import JSON

/// How CIBA's `login_hint` is formed from the username typed at the device (broker.conf's
/// `phoneApprovalLoginHint`): a template in which `{username}` stands for it. CIBA Core leaves the
/// hint's shape to the provider; most take the username as it is (the default), glewlwyd only a
/// JSON object, `{"username":"NAME"}`.
public struct PhoneApprovalLoginHint: Sendable, Equatable, CustomStringConvertible {
    public static let placeholder = "{username}"
    /// The username as typed, the default.
    public static let plain = PhoneApprovalLoginHint(checked: placeholder)

    public let template: String

    /// Why a template cannot be used, in the administrator's terms (without the setting's name,
    /// which the configuration's message puts before it).
    public struct Problem: Error, Sendable, Equatable {
        public var why: String
    }

    /// `template` when it names the username and, where it is JSON (its text with the username
    /// put in starts with `{` or `[`), is JSON a provider could read.
    public init(_ template: String) throws(Problem) {
        guard template.contains(Self.placeholder) else {
            throw Problem(
                why: "has no \(Self.placeholder), so it would name the same person whoever signs in: put "
                    + "\(Self.placeholder) where the username goes")
        }
        let sample = Self(checked: template).hint(for: "alice")
        if let first = sample.unicodeScalars.first(where: { !$0.properties.isWhitespace }), first == "{" || first == "["
        {
            do {
                try StrictJSON.check(Array(sample.utf8), rules: .configuration)
            } catch {
                throw Problem(
                    why: "is not JSON once a username is put in (\(sample): \(error)); write it as the provider "
                        + #"wants it, e.g. {"username":"{username}"}"#)
            }
        }
        self.init(checked: template)
    }

    private init(checked template: String) { self.template = template }

    /// The hint for `username`. Outside the default template the username goes in as the content
    /// of a JSON string (`"`, `\` and control characters escaped), so that no username can end
    /// the string it stands in and add keys of its own; the default sends it exactly as typed (a
    /// `DOMAIN\name` stays one).
    public func hint(for username: String) -> String {
        guard template != Self.placeholder else { return username }
        let quoted = JSONWriter.quoted(username)
        let content = String(quoted.dropFirst().dropLast())
        return template.replacing(Self.placeholder, with: content)
    }

    public var description: String { template }
}

/// OpenID Connect CIBA (Client-Initiated Backchannel Authentication Core 1.0), poll mode: the
/// broker names the user (`login_hint`), the provider asks them on their own authentication
/// device to approve, and the broker polls the token endpoint with the request's id meanwhile.
extension OIDCProvider {
    static let cibaGrant = "urn:openid:params:grant-type:ciba"

    /// `loginHint` is the username as typed; what the provider gets is the administrator's
    /// ``PhoneApprovalLoginHint`` of it.
    public func startPhoneApproval(clientId: String, loginHint username: String, bindingMessage: String, scopes: Scopes)
        async throws -> PhoneApprovalRequest
    {
        let loginHint = phoneApprovalLoginHint.hint(for: username)
        return try await requester.withBudget { () async throws(BrokerFailure) -> PhoneApprovalRequest in
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
                throw Self.backchannelRefusal(
                    Self.oauthError(response), username: username, loginHint: phoneApprovalLoginHint, host: host)
            }
            do throws(IdentityError) {
                return try Self.phoneApprovalRequest(response.body)
            } catch {
                throw error.brokerFailure(during: .signIn(.ciba), host: host)
            }
        }
    }

    /// CIBA Core 13's refusals of the request, in the person's terms; the rest as any request's.
    /// `username` is the one typed, `loginHint` how it was sent.
    static func backchannelRefusal(
        _ error: IdentityError, username: String, loginHint: PhoneApprovalLoginHint, host: String
    ) -> BrokerFailure {
        guard case .oauth(let status, let code, _, _, _) = error, status < 500 else {
            return error.brokerFailure(during: .signIn(.ciba), host: host)
        }
        switch code {
        case "unknown_user_id":
            return BrokerFailure(
                .userNotFound, "the identity provider knows no user \(username) to ask for an approval (\(error))")
        case "access_denied":
            return BrokerFailure(.accessDenied, "the identity provider refused to ask \(username) (\(error))")
        case "invalid_request" where loginHint == .plain:
            // A provider that reads login_hint in a shape of its own (glewlwyd: a JSON object)
            // refuses the username as typed with nothing more than this.
            return BrokerFailure(
                .serverError,
                "the identity provider at \(host) refused the request to ask \(username)'s phone (\(error)); the "
                    + "broker sent login_hint as the username typed, and some providers want it in another shape "
                    + #"(glewlwyd: {"username":"NAME"}): the administrator sets it with phoneApprovalLoginHint in "#
                    + "broker.conf (broker.conf(5)). Until then, sign in another way")
        case "invalid_request":
            return BrokerFailure(
                .serverError,
                "the identity provider at \(host) refused the request to ask \(username)'s phone (\(error)); it may "
                    + "know no such user, or not read login_hint as phoneApprovalLoginHint in broker.conf forms it "
                    + "(\(loginHint.template)): check the username, or sign in another way")
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
