import BrokerCore
import JSON
import Testing

@testable import Identity

/// The names of a person read from userinfo where the ID token has only `sub`: for the same
/// subject only (OpenID Connect Core 5.3.2), and never over the ID token's own claims.
@Suite("Identity claims filled from userinfo")
struct IdentityClaimsTests {
    private func claims(_ pairs: [String: String]) -> IdentityClaims {
        IdentityClaims(claims: .object(pairs.mapValues { JSONValue.string($0) }))
    }

    @Test func onlyASubNamesNobody() {
        #expect(!claims(["sub": "s1"]).namesThePerson)
        #expect(!claims(["sub": "s1", "name": "Alice", "preferred_username": ""]).namesThePerson)
        #expect(claims(["sub": "s1", "email": "alice@contoso.example"]).namesThePerson)
    }

    @Test func userinfoOfTheSameSubjectFillsTheNames() throws {
        let own = claims(["sub": "s1", "name": "Alice from the ID token"])
        let filled = try #require(
            own.filled(from: claims(["sub": "s1", "preferred_username": "alice@contoso.example", "name": "Other"])))
        let account = try filled.account(environment: "idp", fallbackTenant: "t")
        #expect(account.username == "alice@contoso.example")
        #expect(account.name == "Alice from the ID token", "the ID token's own claim wins")
        #expect(account.identifier == "s1.t")
    }

    @Test func userinfoOfAnotherSubjectIsNotUsed() {
        let own = claims(["sub": "s1"])
        #expect(own.filled(from: claims(["sub": "s2", "preferred_username": "mallory@contoso.example"])) == nil)
        #expect(own.filled(from: claims(["preferred_username": "mallory@contoso.example"])) == nil)
    }
}
