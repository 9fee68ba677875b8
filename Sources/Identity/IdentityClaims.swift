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

    /// The claims that name the person to people, beside `sub` (which names them to the provider).
    static let names = ["preferred_username", "email", "upn", "name"]

    /// Whether these claims give a username to show, not only `sub`. OpenID Connect leaves the
    /// names out of an ID token where userinfo serves them (Core 5.4), and some providers do.
    var namesThePerson: Bool {
        Self.names.dropLast().contains { claims[$0]?.string.map { !$0.isEmpty } ?? false }
    }

    /// These claims with the names `userinfo` gives, when it describes the same `sub` (OpenID
    /// Connect Core 5.3.2: a userinfo answer for another subject must not be used); the ID
    /// token's own claims win.
    func filled(from userinfo: IdentityClaims) -> IdentityClaims? {
        guard case .object(var own) = claims, case .object(let other) = userinfo.claims,
            let subject = own["sub"]?.string, other["sub"]?.string == subject
        else { return nil }
        for name in Self.names where own[name] == nil {
            if let value = other[name], value.string != nil { own[name] = value }
        }
        return IdentityClaims(claims: .object(own))
    }
}
