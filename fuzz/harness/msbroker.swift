// Microsoft's broker protocol: MicrosoftBrokerRequest (BrokerDaemon) on any request JSON, for
// every method, then the replies written from what it read. A request it accepts has what its
// method needs (a clientId for the account and token methods, scopes for the token ones), and
// every reply, error objects included, must be a JSON object that reads back with the same
// values: the strings a request carries reach replies (usernames, contexts), and a reply that is
// not JSON is a client that thinks the broker broken.
import BrokerAPI
import BrokerCore
import JSON

@testable import BrokerDaemon
@testable import BrokerPersistence
@testable import Identity

func fuzzOne(_ bytes: [UInt8]) {
    // D-Bus strings are UTF-8; the bus refuses anything else before brokerd sees it.
    let json = String(decoding: bytes, as: UTF8.self)
    for method in MicrosoftBroker1Method.allCases {
        let request: MicrosoftBrokerRequest
        do {
            request = try MicrosoftBrokerRequest(json, for: method)
        } catch {
            if error.status != .apiContractViolation { violated("a refused request is not status 6: \(error)") }
            let reply = MicrosoftBrokerResponse.error(error, correlationId: String(json.prefix(64)), for: method)
            guard let object = parse(reply), errorObject(object, for: method) != nil else {
                violated("an error reply is not the protocol's error object: \(reply)")
            }
            continue
        }
        switch method {
        case .getAccounts, .removeAccount:
            if (request.clientId ?? "").isEmpty { violated("\(method.rawValue) accepted without a clientId") }
        case .acquireTokenSilently, .acquireTokenInteractively:
            if (request.clientId ?? "").isEmpty || request.scopes == nil {
                violated("\(method.rawValue) accepted without a clientId or scopes")
            }
        default:
            break
        }
        _ = request.authorityTenant
        roundTrip(request)
    }
}

/// Writes replies from the request's strings and reads them back.
private func roundTrip(_ request: MicrosoftBrokerRequest) {
    let username = request.account?.username ?? request.username ?? "alice@contoso.example"
    let tenant = request.authorityTenant ?? "tenant"
    let account = Account(
        username: username, identifier: (request.account?.homeAccountId ?? "oid") + "." + tenant, tenantId: tenant,
        environment: request.authority ?? "login.example", name: request.prompt ?? "")
    let accounts = MicrosoftBrokerResponse.accounts([account])
    guard let object = parse(accounts), case .array(let list)? = object["accounts"], list.count == 1,
        list[0]["username"]?.string == username, list[0]["realm"]?.string == tenant
    else { violated("an accounts reply does not read back: \(accounts)") }

    let tokens = AppTokens(
        accessToken: "opaque", expiresOn: Int64.max / 2, idToken: nil, scopes: Scopes(request.scopes ?? []),
        account: account, authority: request.authority ?? "https://login.example/t/v2.0",
        correlationId: "c")
    let token = MicrosoftBrokerResponse.token(tokens, clientId: request.clientId ?? "")
    guard let reply = parse(token)?["brokerTokenResponse"], reply["grantedScopes"]?.string == tokens.scopes.joined,
        reply["idToken"]?.string?.split(separator: ".", omittingEmptySubsequences: false).count == 3
    else { violated("a token reply does not read back: \(token)") }
}

private func parse(_ text: String) -> JSONValue? {
    guard let value = try? JSONValue.providerObject(Array(text.utf8), what: "a reply") else { return nil }
    return value
}

private func errorObject(_ reply: JSONValue, for method: MicrosoftBroker1Method) -> JSONValue? {
    let error =
        method == .acquireTokenSilently || method == .acquireTokenInteractively
        ? reply["brokerTokenResponse"]?["error"] : reply["error"]
    guard let error, error["context"]?.string != nil else { return nil }
    for key in ["errorCode", "status", "subStatus", "tag"] where error[key]?.number == nil { return nil }
    return error
}
