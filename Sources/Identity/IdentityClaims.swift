import BrokerCore
import JSON

/// Who signed in, read from ID-token claims or a userinfo answer (the same claim names).
struct IdentityClaims: Sendable {
    let claims: JSONValue

    /// The account these claims describe. The identifier is `<oid>.<tid>` (Entra's home
    /// account id); providers without `oid`/`tid` get `sub` and the configured tenant.
    ///
    /// Every claim is text from the provider and meets the outside-text rule here, where it
    /// enters: a NUL or an escape in a display name is replaced, so the account can be stored,
    /// announced to every app and shown. Refusing it would lock the person out for a provider's
    /// mistake.
    func account(environment: String, fallbackTenant: String) throws(IdentityError) -> Account {
        guard let subject = claims["sub"]?.string.map(OutsideText.cleaned), !subject.isEmpty else {
            throw IdentityError.invalidIDToken("it has no sub claim")
        }
        // An empty claim is no claim: it must not hide a usable one after it.
        func text(_ name: String) -> String? {
            claims[name]?.string.flatMap { $0.isEmpty ? nil : OutsideText.cleaned($0) }
        }
        let objectId = text("oid") ?? subject
        let tenant = text("tid") ?? fallbackTenant
        let username = text("preferred_username") ?? text("email") ?? text("upn") ?? subject
        return Account(
            username: username, identifier: tenant.isEmpty ? objectId : "\(objectId).\(tenant)",
            tenantId: tenant, environment: environment, name: text("name") ?? username)
    }
}
