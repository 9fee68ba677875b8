import BrokerAPI
import BrokerCore
import BrokerPersistence
import FoundationEssentials
import Identity
import JSON

/// A request of Microsoft's broker protocol (`com.microsoft.identity.Broker1`), read from its JSON
/// as the protocol's clients write it (docs/microsoft-broker1.md): strict JSON (``StrictJSON``:
/// no key twice, no byte order mark, no trailing comma), unknown keys ignored, everything the
/// broker acts on type-checked, and what does not hold is a
/// ``MicrosoftBrokerFailure`` with status 6 (ApiContractViolation), before anything changes.
///
/// Unknown keys are ignored here, unlike the options of `io.shareddevice.Broker1` (which refuses
/// them): this protocol is Microsoft's, and its clients (MSAL, Edge, ...) send fields brokerd does
/// not act on (`redirectUri`, `popParams`, ...), more with each of their releases. Refusing them
/// would break apps that nobody here can change.
struct MicrosoftBrokerRequest: Sendable, Equatable {
    /// At most this many bytes of request JSON: the protocol's requests are a few KiB.
    static let maxBytes = 64 * 1024

    /// The app the call acts for (`clientId`, in `authParameters` or at the top level).
    var clientId: String?
    /// `requestedScopes`.
    var scopes: [String]?
    /// The account the app names: its `homeAccountId` (the broker's `<oid>.<tid>` identifier,
    /// "" when not given) and `username`; nil for `"account": null` or none.
    var account: AccountReference?
    /// `authority`, e.g. `https://login.microsoftonline.com/common`.
    var authority: String?
    /// `prompt` of an interactive request.
    var prompt: String?
    /// `username`: the login hint.
    var username: String?
    /// The claims request (`claims`, or `decodedClaims` as Microsoft's library names the JSON), with
    /// the request's `clientCapabilities` merged in as `xms_cc`; nil when it has no claims.
    var claims: String?

    struct AccountReference: Sendable, Equatable {
        var homeAccountId: String
        var username: String
    }

    /// Parses `json` for `method`.
    init(_ json: String, for method: MicrosoftBroker1Method) throws(MicrosoftBrokerFailure) {
        guard json.utf8.count <= Self.maxBytes else {
            throw .contractViolation("the request is \(json.utf8.count) bytes; at most \(Self.maxBytes) are accepted")
        }
        let document: JSONValue
        do {
            document = try JSONValue.parse(Array(json.utf8), rules: .request)
        } catch {
            throw .contractViolation("the request \(error)")
        }
        guard case .object(let root) = document else {
            throw .contractViolation("the request is not a JSON object")
        }
        // Token requests carry their parameters in authParameters; some clients send a few at the top level.
        let parameters: [String: JSONValue]
        switch root["authParameters"] {
        case nil, .null?: parameters = [:]
        case .object(let object)?: parameters = object
        default: throw .contractViolation("authParameters must be an object")
        }
        func field(_ key: String) -> JSONValue? {
            switch parameters[key] {
            case nil, .null?: return root[key]
            case let value?: return value
            }
        }
        clientId = try Self.string(field("clientId"), "clientId")
        scopes = try Self.strings(field("requestedScopes"), "requestedScopes")
        authority = try Self.string(field("authority"), "authority")
        prompt = try Self.string(field("prompt"), "prompt")
        username = try Self.string(field("username"), "username")
        account = try Self.account(field("account"))
        var requestedClaims = try Self.string(field("claims"), "claims")
        if requestedClaims?.isEmpty != false {
            requestedClaims = try Self.string(field("decodedClaims"), "decodedClaims")
        }
        let capabilities = try Self.strings(field("clientCapabilities"), "clientCapabilities") ?? []
        do throws(BrokerFailure) {
            let decoded = try requestedClaims.flatMap { (text: String) throws(BrokerFailure) in
                text.isEmpty ? nil : try ClaimsRequest.decode(text)
            }
            // Capabilities alone are no challenge: a cp1 app sends them with every call, and its
            // calls must still be answered from the cache (the configuration's clientCapabilities
            // declare them to the provider). With a challenge, they go with it.
            claims = decoded.flatMap { ClaimsRequest.parameter($0, capabilities: capabilities) }
        } catch {
            throw .contractViolation(error.message)
        }

        switch method {
        case .getAccounts, .removeAccount, .acquireTokenSilently, .acquireTokenInteractively:
            guard let clientId, !clientId.isEmpty else { throw .contractViolation("the request has no clientId") }
            if method == .acquireTokenSilently || method == .acquireTokenInteractively, scopes == nil {
                throw .contractViolation("the request has no requestedScopes")
            }
        case .acquirePrtSsoCookie, .generateSignedHttpRequest, .cancelInteractiveFlow, .getLinuxBrokerVersion:
            break
        }
    }

    private static func string(_ value: JSONValue?, _ key: String) throws(MicrosoftBrokerFailure) -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let text)?: return text
        default: throw .contractViolation("\(key) must be a string")
        }
    }

    private static func strings(_ value: JSONValue?, _ key: String) throws(MicrosoftBrokerFailure) -> [String]? {
        switch value {
        case nil, .null?: return nil
        case .array(let items)?:
            var texts: [String] = []
            for item in items {
                guard case .string(let text) = item else { throw .contractViolation("\(key) must be strings") }
                texts.append(text)
            }
            return texts
        default: throw .contractViolation("\(key) must be an array of strings")
        }
    }

    private static func account(_ value: JSONValue?) throws(MicrosoftBrokerFailure) -> AccountReference? {
        switch value {
        case nil, .null?: return nil
        case .object(let object)?:
            let home = try string(object["homeAccountId"], "account.homeAccountId") ?? ""
            let username = try string(object["username"], "account.username") ?? ""
            return home.isEmpty && username.isEmpty ? nil : AccountReference(homeAccountId: home, username: username)
        default: throw .contractViolation("account must be an object")
        }
    }

    /// The tenant `authority` names (its first path segment, e.g. `common` or a tenant id), if any.
    var authorityTenant: String? {
        guard let authority, let scheme = authority.firstRange(of: "://") else { return nil }
        let path = authority[scheme.upperBound...].drop { $0 != "/" }.dropFirst()
        let tenant = path.prefix { $0 != "/" && $0 != "?" }
        return tenant.isEmpty ? nil : String(tenant)
    }
}
