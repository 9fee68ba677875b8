import BrokerAPI
import BrokerCore
import FoundationEssentials
import Identity

/// A failure as Microsoft's broker protocol reports it: a JSON error object in a normal reply
/// (`context`, `errorCode`, `status`, `subStatus`, `tag`, all five always present), never a D-Bus
/// error, which clients read as a broken broker.
struct MicrosoftBrokerFailure: Error, Sendable, Equatable {
    /// MSAL runtime's response status.
    enum Status: Int, Sendable {
        case unexpected = 0
        case interactionRequired = 2
        case noNetwork = 3
        case serverTemporarilyUnavailable = 5
        case apiContractViolation = 6
        case userCanceled = 7
        case applicationCanceled = 8
        case incorrectConfiguration = 9
        case authorityUntrusted = 11
        case userSwitch = 12
        case accountUnusable = 13
        case accountNotFound = 16
        case transientError = 17
    }

    var status: Status
    var context: String

    static func contractViolation(_ context: String) -> Self { Self(status: .apiContractViolation, context: context) }

    /// The broker's own error, for a request that `namedAccount` (or did not).
    init(_ failure: BrokerFailure, namedAccount: Bool = false) {
        context = failure.message
        switch failure.code {
        case .interactionRequired: status = .interactionRequired
        // Nobody (or someone else) is signed in: an app that named its account learns that the
        // account is gone; one that named none, that it has to sign in.
        case .noAccount: status = namedAccount ? .accountNotFound : .interactionRequired
        case .userNotFound: status = .accountNotFound
        case .accountAlreadySignedIn: status = .userSwitch
        case .serverUnavailable: status = .serverTemporarilyUnavailable
        case .invalidArgument, .invalidUsername: status = .apiContractViolation
        case .cancelled: status = .userCanceled
        case .unknownClient, .notSupported, .accessDenied, .browserUnavailable, .notConfigured:
            status = .incorrectConfiguration
        case .limitsExceeded, .storageFailed, .storageLocked: status = .transientError
        case .invalidPassword, .invalidCode, .codeExpired, .flowNotFound, .serverError: status = .unexpected
        }
    }

    init(status: Status, context: String) {
        self.status = status
        self.context = context
    }
}

/// The JSON replies of Microsoft's broker protocol, in the shapes its clients require
/// (docs/microsoft-broker1.md): millisecond expiries, granted scopes as one space-separated string,
/// the raw ID token, `clientInfo`, and the account object with every key.
enum MicrosoftBrokerResponse {
    /// `{"accounts": [...]}`.
    static func accounts(_ accounts: [Account]) -> String {
        encode(["accounts": accounts.map(AccountObject.init)])
    }

    /// `{"brokerTokenResponse": {...}}` for tokens issued to `clientId`.
    static func token(_ tokens: AppTokens, clientId: String) -> String {
        let account = AccountObject(tokens.account)
        let expiresOn = tokens.expiresOn.multipliedReportingOverflow(by: 1000)
        let milliseconds = expiresOn.overflow ? Int64.max : expiresOn.partialValue
        return encode(
            [
                "brokerTokenResponse": TokenObject(
                    accessToken: tokens.accessToken, accessTokenType: 0, clientInfo: account.clientInfo,
                    expiresOn: milliseconds, extendedExpiresOn: milliseconds,
                    idToken: tokens.idToken ?? unsignedIDToken(tokens, clientId: clientId),
                    grantedScopes: tokens.scopes.joined, account: account)
            ])
    }

    /// `{"linuxBrokerVersion": "X.Y.Z"}`.
    static func version(_ version: String) -> String { encode(["linuxBrokerVersion": version]) }

    /// `{}`: what removeAccount and cancelInteractiveFlow answer.
    static let empty = "{}"

    /// The error object, inside `brokerTokenResponse` for the token methods, at the top level for the others.
    static func error(_ failure: MicrosoftBrokerFailure, correlationId: String, for method: MicrosoftBroker1Method)
        -> String
    {
        let context = correlationId.isEmpty ? failure.context : "\(failure.context) (correlation id \(correlationId))"
        let object = ErrorObject(context: context, errorCode: 0, status: failure.status.rawValue, subStatus: 0, tag: 0)
        switch method {
        case .acquireTokenSilently, .acquireTokenInteractively:
            return encode(["brokerTokenResponse": ["error": object]])
        default:
            return encode(["error": object])
        }
    }

    // MARK: The shapes

    /// The protocol's account object. `homeAccountId` is the broker's account identifier
    /// (`<oid>.<tid>`), which clients echo back.
    struct AccountObject: Encodable, Sendable {
        var environment: String
        var homeAccountId: String
        var localAccountId: String
        var realm: String
        var username: String
        var name: String
        var givenName = ""
        var familyName = ""
        var passwordExpiry = 0
        var clientInfo: String

        init(_ account: Account) {
            let suffix = "." + account.tenantId
            let objectId =
                account.identifier.hasSuffix(suffix)
                ? String(account.identifier.dropLast(suffix.count))
                : String(account.identifier.prefix { $0 != "." })
            environment = account.environment
            homeAccountId = account.identifier
            localAccountId = objectId
            realm = account.tenantId
            username = account.username
            name = account.name
            // base64url, no padding, of {"uid": oid, "utid": tid}.
            clientInfo = Base64URL.encode(
                MicrosoftBrokerResponse.encode(["uid": objectId, "utid": account.tenantId]).utf8)
        }
    }

    struct TokenObject: Encodable, Sendable {
        var accessToken: String
        var accessTokenType: Int
        var clientInfo: String
        var expiresOn: Int64
        var extendedExpiresOn: Int64
        var idToken: String
        var grantedScopes: String
        var account: AccountObject
    }

    struct ErrorObject: Encodable, Sendable {
        var context: String
        var errorCode: Int
        var status: Int
        var subStatus: Int
        var tag: Int
    }

    /// Clients decode the ID token for the account's claims (they do not verify it). Where the
    /// provider gave none (a grant answered without one, the account read from userinfo), the
    /// broker writes an unsigned one (`alg` `none`) with those claims, so that such clients work.
    static func unsignedIDToken(_ tokens: AppTokens, clientId: String) -> String {
        let account = AccountObject(tokens.account)
        let header = encode(["alg": "none", "typ": "JWT"])
        let claims = encode(
            IDTokenClaims(
                aud: clientId, iss: tokens.authority, sub: account.localAccountId, oid: account.localAccountId,
                tid: account.realm, preferredUsername: account.username, name: account.name, exp: tokens.expiresOn))
        return Base64URL.encode(header.utf8) + "." + Base64URL.encode(claims.utf8) + "."
    }

    struct IDTokenClaims: Encodable, Sendable {
        var aud, iss, sub, oid, tid, preferredUsername, name: String
        var exp: Int64

        enum CodingKeys: String, CodingKey {
            case aud, iss, sub, oid, tid, name, exp
            case preferredUsername = "preferred_username"
        }
    }

    static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Strings, integers and these structs always encode; "{}" keeps the reply JSON regardless.
        guard let data = try? encoder.encode(value) else { return empty }
        return String(decoding: data, as: UTF8.self)
    }
}
