import BrokerCore
import HTTP
import JSON

/// What can go wrong between the broker and its identity provider.
public enum IdentityError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not an absolute http(s) URL.
    case invalidURL(String)
    /// Plain HTTP to something other than the loopback.
    case insecureURL(String)
    /// The provider could not be reached (connection refused, DNS, timeout).
    case unreachable(HTTPError)
    /// The provider answered with an OAuth error (`error`, `error_description`, `error_codes`).
    case oauth(status: Int, error: String, description: String, codes: [Int], suberror: String?)
    /// The provider answered something that is not what the standards say it should.
    case badResponse(String)
    /// The ID token failed validation.
    case invalidIDToken(String)
    /// The account belongs to a tenant the configuration does not admit (a multi-tenant authority).
    case tenantNotAllowed(String)
    /// The provider signed the person in without the fresh authentication the request asked for
    /// (`auth_time` older than `max_age` allows), or without saying when (no usable `auth_time`):
    /// the text says so.
    case staleAuthentication(String)
    /// The provider is down, too slow, or says it is unavailable (503, 429, 502, 504), after the
    /// retries the policy allows; the text says where, what, how long and how often.
    case unavailable(String)
    /// The provider failed with a server error (500 and the like); the text says where and what.
    case serverFailure(String)
    /// The caller went away while the broker waited for the provider.
    case cancelled
    /// No browser could be given a page: what was tried and why each failed.
    case browserUnavailable(String)
    /// Every port the administrator fixed for the browser's return (`loopbackRedirectPorts`) is
    /// taken: the text names them and what to do.
    case redirectPortsTaken(String)
    /// The authority is not an OpenID Connect issuer (its discovery document is not there, or is
    /// another issuer's): a configuration to fix, not a provider to wait for. The text says which.
    case notAnIssuer(String)

    public var description: String {
        switch self {
        case .invalidURL(let url): return "\(url) is not an absolute http(s) URL"
        case .insecureURL(let url):
            return "\(url) uses plain HTTP; only the loopback (127.0.0.1, localhost) may, anything else needs HTTPS"
        case .unreachable(let error): return "the identity provider could not be reached: \(error)"
        case .oauth(let status, let error, let description, _, _):
            return description.isEmpty
                ? "the provider answered \(status) \(error)"
                : "the provider answered \(status) \(error): \(description)"
        case .badResponse(let why): return "the identity provider's answer is not valid: \(why)"
        case .invalidIDToken(let why): return "the ID token is not valid: \(why)"
        case .unavailable(let text), .serverFailure(let text), .tenantNotAllowed(let text),
            .staleAuthentication(let text), .redirectPortsTaken(let text):
            return text
        case .cancelled: return "the request was cancelled"
        case .browserUnavailable(let why): return "no browser could be opened: \(why)"
        case .notAnIssuer(let text): return text
        }
    }

    /// The broker error for this, with the provider's `host` named where the text does not
    /// name it already.
    func brokerFailure(during kind: GrantKind, host: String) -> BrokerFailure {
        switch self {
        case .badResponse(let why):
            return BrokerFailure(
                .serverError,
                "the identity provider at \(host) gave an answer that is not valid: \(why); "
                    + "try again later, and tell the provider's administrator if it persists")
        case .unreachable(let error):
            return BrokerFailure(
                .serverUnavailable, "the identity provider at \(host) could not be reached (\(error)); try again later")
        case .invalidIDToken:
            return BrokerFailure(
                .serverError,
                "\(description); the broker refused the answer. If this persists, tell the "
                    + "administrator of the identity provider at \(host): it is misconfigured, or not the provider it "
                    + "claims to be"
            )
        default:
            return brokerFailure(during: kind)
        }
    }

    /// The broker error a caller gets for this, for a grant of `kind`.
    func brokerFailure(during kind: GrantKind) -> BrokerFailure {
        switch self {
        case .invalidURL, .insecureURL:
            return BrokerFailure(.serverError, "the broker's configuration is wrong: \(self)")
        case .unreachable:
            return BrokerFailure(.serverUnavailable, "\(self); try again later")
        case .badResponse, .invalidIDToken:
            return BrokerFailure(.serverError, description)
        case .unavailable(let text):
            return BrokerFailure(.serverUnavailable, text)
        case .serverFailure(let text):
            return BrokerFailure(.serverError, text)
        case .tenantNotAllowed(let text), .staleAuthentication(let text):
            return BrokerFailure(.accessDenied, text)
        case .cancelled:
            return BrokerFailure(.cancelled, "the request was cancelled")
        case .browserUnavailable:
            return BrokerFailure(.browserUnavailable, description)
        case .redirectPortsTaken(let text):
            return BrokerFailure(.browserUnavailable, text)
        case .notAnIssuer(let text):
            return BrokerFailure(.notConfigured, text)
        case .oauth(let status, let error, _, let codes, let suberror):
            let text = description
            if status >= 500 || status == 429 {
                return BrokerFailure([429, 502, 503, 504].contains(status) ? .serverUnavailable : .serverError, text)
            }
            // An app the provider does not know (Entra's AADSTS700016 comes with invalid_client
            // or, from native authentication, unauthorized_client) is the same on every path: no
            // other mechanism and no person signing in can make the provider know it.
            if error == "invalid_client" || codes.contains(700016) {
                return BrokerFailure(.unknownClient, Self.unknownClientText(text))
            }
            if kind.isSingleSignOn {
                // Whatever the provider refuses here (a dead grant, a client it may not serve,
                // a grant type it stopped taking), the way on is another mechanism or a person.
                // Native SSO's invalid_grant: the device secret or its session is gone.
                return BrokerFailure(
                    .interactionRequired, "the provider refused \(kind.request) (\(text))",
                    grantEnded: kind == .deviceSecretExchange && error == "invalid_grant"
                        && !Self.asksForThePerson(codes: codes, suberror: suberror))
            }
            switch error {
            case "unauthorized_client":
                // A registered app the provider does not let use this grant (a public client
                // asking for client credentials): its registration is what to check.
                return BrokerFailure(
                    .unknownClient,
                    "the provider does not let this clientId make this request (\(text)); check the app's "
                        + "registration at the identity provider")
            case "user_not_found":
                return BrokerFailure(.userNotFound, text)
            case "invalid_scope" where kind == .refresh:
                // Scopes beyond the refresh token's grant: the token still serves the scopes it
                // has. The provider's words only: the core tries single sign-on for these scopes
                // and, where it cannot get them, words the error with the call and scopes to use.
                return BrokerFailure(.interactionRequired, text, refreshTokenStillValid: true)
            case "invalid_scope":
                return BrokerFailure(.invalidArgument, text)
            case "interaction_required", "login_required", "consent_required", "redirect":
                return BrokerFailure(.interactionRequired, text)
            case "expired_token" where kind == .refresh:
                return BrokerFailure(.interactionRequired, text, grantEnded: true)
            case "expired_token":
                return BrokerFailure(.codeExpired, text)
            case "invalid_grant":
                switch kind {
                case .refresh:
                    return BrokerFailure(
                        .interactionRequired, "the refresh token was refused (\(text)); sign in interactively",
                        grantEnded: !Self.asksForThePerson(codes: codes, suberror: suberror))
                case .signIn(.emailCode) where suberror == "invalid_oob_value":
                    return BrokerFailure(.invalidCode, "the code is not correct; type it again")
                case .signIn(.password) where codes.contains(50034) || suberror == "user_not_found":
                    return BrokerFailure(.userNotFound, text)
                case .signIn(.password):
                    return BrokerFailure(.invalidPassword, "the username or password is not correct")
                default: return BrokerFailure(.interactionRequired, text)
                }
            default:
                return BrokerFailure(.serverError, text)
            }
        }
    }
}

extension IdentityError {
    /// What an app the provider refuses to know is told: the provider's words, and what to do.
    static func unknownClientText(_ text: String) -> String {
        "the provider does not know this clientId (\(text)); the app's clientId must be registered at the "
            + "identity provider"
    }

    /// Entra answers a refresh that needs the person (multi-factor authentication, a
    /// conditional-access policy, consent) with `invalid_grant` too, told apart by its suberror or
    /// AADSTS code: the grant is not gone, the person must act.
    static func asksForThePerson(codes: [Int], suberror: String?) -> Bool {
        if let suberror, ["basic_action", "additional_action", "consent_required", "message_only"].contains(suberror) {
            return true
        }
        return !Set(codes).isDisjoint(with: [50076, 50079, 50158, 53000, 53001, 53003, 65001])
    }
}

/// Which grant a provider answer belongs to; the same OAuth error means different things.
enum GrantKind: Sendable, Equatable {
    /// A person signing in, by one of the flows (``SignInFlow``).
    case signIn(SignInFlow)
    case refresh, other
    /// Single sign-on: Native SSO's or RFC 8693's token exchange, a family refresh token redeemed for another app.
    case deviceSecretExchange, tokenExchange, familyRefresh

    /// The token request of this kind, in words, for messages.
    var request: String {
        switch self {
        case .signIn(let flow): "the \(flow.inWords)'s token request"
        case .refresh: "the token refresh"
        case .other: "the token request"
        case .deviceSecretExchange: "the Native SSO token exchange"
        case .tokenExchange: "the token exchange"
        case .familyRefresh: "the family refresh token"
        }
    }

    /// A sign-in by a person that anchors single sign-on: the grants that may ask for Native
    /// SSO's device secret. The flow says (``SignInFlow/startsSingleSignOn``), so that a flow
    /// added cannot be forgotten here.
    var isSignIn: Bool {
        switch self {
        case .signIn(let flow): flow.startsSingleSignOn
        case .refresh, .other, .deviceSecretExchange, .tokenExchange, .familyRefresh: false
        }
    }

    var isSingleSignOn: Bool {
        switch self {
        case .deviceSecretExchange, .tokenExchange, .familyRefresh: true
        case .signIn, .refresh, .other: false
        }
    }
}

extension JSONValue {
    /// A provider's JSON object (RFC 8259, no key twice: ``StrictJSON/Rules/provider``), or why
    /// it is not one: where provider bytes become JSON.
    static func providerObject(_ bytes: [UInt8], what: String) throws(IdentityError) -> JSONValue {
        let value = try providerValue(bytes, what: what)
        guard case .object = value else { throw IdentityError.badResponse("\(what) is not a JSON object") }
        return value
    }

    /// A provider's JSON value (an object or an array, where a standard allows either).
    static func providerValue(_ bytes: [UInt8], what: String) throws(IdentityError) -> JSONValue {
        do {
            return try JSONValue.parse(bytes, rules: .provider)
        } catch {
            throw IdentityError.badResponse("\(what) is not JSON")
        }
    }
}
