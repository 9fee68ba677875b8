import BrokerCore

/// Who signed in, read from ID-token claims or a userinfo answer (the same claim names).
struct IdentityClaims: Sendable {
    let claims: JSONValue

    /// The account these claims describe. The identifier is `<oid>.<tid>` (Entra's home
    /// account id); providers without `oid`/`tid` get `sub` and the configured tenant.
    func account(environment: String, fallbackTenant: String) throws(IdentityError) -> Account {
        guard let subject = claims["sub"]?.string, !subject.isEmpty else {
            throw IdentityError.invalidIDToken("it has no sub claim")
        }
        let objectId = claims["oid"]?.string ?? subject
        let tenant = claims["tid"]?.string ?? fallbackTenant
        let username = claims["preferred_username"]?.string ?? claims["email"]?.string
            ?? claims["upn"]?.string ?? subject
        return Account(username: username, identifier: tenant.isEmpty ? objectId : "\(objectId).\(tenant)",
                       tenantId: tenant, environment: environment, name: claims["name"]?.string ?? username)
    }
}
