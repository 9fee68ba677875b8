import BrokerCore
import HTTP
import JSON

/// The device authorization grant (RFC 8628): for a kiosk without a browser, or a person who would
/// rather use their phone. The device asks for a user code, the person enters it at the
/// verification URI on another device, and the broker polls the token endpoint meanwhile.
extension OIDCProvider {
    static let deviceCodeGrant = "urn:ietf:params:oauth:grant-type:device_code"

    public func startDeviceSignIn(clientId: String, scopes: Scopes) async throws -> DeviceAuthorizationGrant {
        try await requester.withBudget { () async throws(BrokerFailure) -> DeviceAuthorizationGrant in
            let endpoints = try await endpoints(for: .signIn(.deviceCode))
            guard let url = endpoints.deviceAuthorizationEndpoint else {
                throw BrokerFailure(
                    .notSupported,
                    "the identity provider offers no device sign-in (its discovery document names no "
                        + "device_authorization_endpoint); sign in with the browser or a password")
            }
            var request = HTTPRequest.postForm(
                url,
                fields: authenticated(
                    clientId, [("scope", Self.scopeParameter(scopes, kind: .signIn(.deviceCode), endpoints: endpoints))]
                ))
            addBasicAuthentication(clientId, to: &request)
            let response = try await send(
                request, kind: .signIn(.deviceCode), what: "the device authorization request", replay: .oneTime)
            guard response.status == 200 else {
                throw Self.oauthError(response).brokerFailure(during: .signIn(.deviceCode), host: host)
            }
            do throws(IdentityError) {
                return try Self.deviceGrant(response.body)
            } catch {
                throw error.brokerFailure(during: .signIn(.deviceCode), host: host)
            }
        }
    }

    /// RFC 8628 3.2's fields; `expires_in` and `interval` bounded (a day; one second to five
    /// minutes, 5 s when absent) so no answer can make the broker poll in a tight loop or never.
    static func deviceGrant(_ body: [UInt8]) throws(IdentityError) -> DeviceAuthorizationGrant {
        let object = try JSONValue.providerObject(body, what: "the device authorization answer")
        // What the person is shown (the code, the addresses) meets the outside-text rule here.
        guard let deviceCode = object["device_code"]?.string, !deviceCode.isEmpty,
            let userCode = object["user_code"]?.string.map(OutsideText.cleaned), !userCode.isEmpty,
            let verification = (object["verification_uri"]?.string ?? object["verification_url"]?.string)
                .map(OutsideText.cleaned)
        else {
            throw IdentityError.badResponse(
                "the device authorization answer lacks device_code, user_code or verification_uri")
        }
        _ = try Authority.checkedHost(of: verification)
        let complete = try object["verification_uri_complete"]?.string.map { uri throws(IdentityError) in
            _ = try Authority.checkedHost(of: uri)
            return OutsideText.cleaned(uri)
        }
        return DeviceAuthorizationGrant(
            deviceCode: deviceCode, userCode: userCode, verificationUri: verification,
            verificationUriComplete: complete,
            expiresIn: min(max(1, object["expires_in"]?.int64 ?? 900), 86_400),
            interval: min(max(1, object["interval"]?.int64 ?? 5), 300))
    }

    public func pollDeviceSignIn(clientId: String, deviceCode: String, scopes: Scopes) async throws -> SignInPoll {
        try await requester.withBudget { () async throws(BrokerFailure) -> SignInPoll in
            // RFC 8628 3.4: the token request carries no scope; the grant's was asked for at the start.
            let (response, endpoints, _) = try await postGrant(
                .signIn(.deviceCode), clientId: clientId, scope: nil,
                fields: [("grant_type", Self.deviceCodeGrant), ("device_code", deviceCode)])
            if response.status != 200 {
                let error = Self.oauthError(response)
                if case .oauth(_, let code, _, _, _) = error {
                    switch code {
                    case "authorization_pending": return .pending
                    case "slow_down": return .slowDown
                    case "access_denied":
                        throw BrokerFailure(.accessDenied, "the sign-in was denied on the verification page")
                    case "expired_token":
                        throw BrokerFailure(
                            .codeExpired, "the code expired before anyone signed in with it; start the sign-in again")
                    default: break
                    }
                }
                throw error.brokerFailure(during: .signIn(.deviceCode), host: host)
            }
            do throws(IdentityError) {
                return .tokens(
                    try await tokens(
                        from: response, clientId: clientId, scopes: scopes, nonce: nil, endpoints: endpoints))
            } catch {
                throw error.brokerFailure(during: .signIn(.deviceCode), host: host)
            }
        }
    }
}
