/// Single sign-on between apps: once one app has signed a user in, any other app's silent call
/// for that account gets tokens of its own (issued to its clientId, for the scopes it asks),
/// without a person. The broker uses the provider's standard mechanisms, in the order
/// `SingleSignOnMechanism.tryingOrder` states:
///
/// 1. OpenID Connect Native SSO: the sign-in's device secret and ID token, exchanged for the app.
/// 2. A family refresh token (Entra's `foci`) of the signing-in app, redeemed for the app.
/// 3. OAuth 2.0 Token Exchange (RFC 8693) of the signing-in app's token.
///
/// A mechanism the provider refuses for this app (`.interactionRequired`) passes to the next;
/// when none is left the app gets `.interactionRequired`, saying why, and nothing else changes.
/// Tokens of one app are never handed to another: each app gets its own from the provider.
extension Broker {
    /// The account a silent call of `clientId` is for: its own (the device's in shared mode), or
    /// in default mode, an account another app signed in with and single sign-on can serve.
    nonisolated func silentAccount(clientId: String, accountId: String, in state: BrokerState) throws(BrokerFailure)
        -> Account
    {
        if configuration.deviceMode == .default, state.clients[clientId]?.account == nil, !accountId.isEmpty,
            let account = singleSignOnAccount(accountId, in: state)
        {
            return account
        }
        return try signedInAccount(clientId: clientId, accountId: accountId, in: state)
    }

    /// The account whose sign-in made the grant for `identifier`, while that sign-in stands.
    nonisolated func singleSignOnAccount(_ identifier: String, in state: BrokerState) -> Account? {
        guard let grant = state.singleSignOn[identifier],
            let account = state.clients[grant.anchorClientId]?.account, account.identifier == identifier
        else { return nil }
        return account
    }

    /// Tokens of `clientId`'s own for `account` through a grant another app's sign-in made.
    /// Runs as the app's single flight (``Broker/refreshes``), so concurrent first calls of one app
    /// make one exchange.
    func signInThroughSingleSignOn(
        clientId: String, scopes: Scopes, account: Account, correlationId: String,
        startGeneration: UInt64
    ) async throws(BrokerFailure) -> AppTokens {
        let outcome = try await trySingleSignOn(
            clientId: clientId, scopes: scopes, account: account, widening: nil, correlationId: correlationId,
            startGeneration: startGeneration)
        switch outcome {
        case .success(let tokens):
            return tokens
        case .failure(.noGrant):
            throw BrokerFailure(
                .interactionRequired,
                "this app holds no refresh token for \(account.username), and no sign-in of another app on this device "
                    + "can give it one; sign in interactively")
        case .failure(.notOffered):
            throw BrokerFailure(
                .interactionRequired,
                "the identity provider offers no single sign-on between apps (neither OpenID Connect Native SSO, "
                    + "family "
                    + "refresh tokens nor OAuth 2.0 token exchange), so this app must sign \(account.username) in "
                    + "interactively"
            )
        case .failure(.nothingUsable(let mechanisms)):
            throw BrokerFailure(
                .interactionRequired,
                "the sign-in of \(account.username) on this device holds nothing the provider's single sign-on "
                    + "(\(mechanisms.map(\.rawValue).joined(separator: ", "))) can use; sign in interactively")
        case .failure(.refused(let refusals)):
            throw BrokerFailure(
                .interactionRequired,
                "the identity provider refused single sign-on for this app (\(refusals.joined(separator: "; "))); "
                    + "sign \(account.username) in interactively")
        }
    }

    /// The app's refresh token was refused for scopes beyond its grant (`refusal`, the provider's
    /// `invalid_scope`). A person asked again on a kiosk whose sign-in was a password would not
    /// know why, so the broker first gets the wider token through the device's sign-in, as it
    /// would for another app, and adopts its refresh token. Where no mechanism can, the error
    /// names the call that asks the user and the scopes to give it; the old refresh token is
    /// kept either way when nothing replaces it, since it still serves the scopes it has.
    func widenThroughSingleSignOn(
        clientId: String, scopes: Scopes, account: Account, refusal: BrokerFailure, replacing refreshToken: String,
        correlationId: String, startGeneration: UInt64
    ) async throws(BrokerFailure) -> AppTokens {
        let outcome = try await trySingleSignOn(
            clientId: clientId, scopes: scopes, account: account, widening: refreshToken,
            correlationId: correlationId, startGeneration: startGeneration)
        let why: String
        switch outcome {
        case .success(let tokens):
            logger.info(
                "scopes beyond the app's grant came through single sign-on",
                metadata: ["clientId": "\(clientId)", "correlationId": "\(correlationId)"])
            return tokens
        case .failure(.noGrant): why = "no sign-in on this device can give them"
        case .failure(.notOffered): why = "the identity provider offers no single sign-on between apps"
        case .failure(.nothingUsable(let mechanisms)):
            why =
                "the sign-in on this device holds nothing the provider's single sign-on "
                + "(\(mechanisms.map(\.rawValue).joined(separator: ", "))) can use"
        case .failure(.refused(let refusals)): why = refusals.joined(separator: "; ")
        }
        throw consentNeeded(clientId: clientId, scopes: scopes, refusal: refusal, singleSignOn: why)
    }

    /// The error of scopes only a person can grant: which scopes, why the broker could not get
    /// them, and the call to make, with every scope the app holds and the new ones, so that the
    /// new grant serves all of them.
    private nonisolated func consentNeeded(
        clientId: String, scopes: Scopes, refusal: BrokerFailure, singleSignOn: String
    ) -> BrokerFailure {
        // What this app was granted, as far as the tokens it holds show (access tokens are kept
        // in memory only, so after a restart the call's scopes are all the broker knows).
        let cached = state.clients[clientId]?.accessTokens.values.flatMap(\.scopes.resourceScopes) ?? []
        let held = Set(cached).sorted()
        let heldLowered = Set(held.map { $0.lowercased() })
        var missing = scopes.resourceScopes.filter { !heldLowered.contains($0.lowercased()) }
        if missing.isEmpty { missing = scopes.resourceScopes }
        let all = held + missing.filter { !held.contains($0) }
        let named = missing.isEmpty ? "these scopes" : "scopes \(missing.joined(separator: " "))"
        let with = all.isEmpty ? "" : " with scopes \(all.joined(separator: " "))"
        // The call to make first, where a person reads; then why, for whoever looks further.
        return BrokerFailure(
            .interactionRequired,
            "the provider gives \(named) only with the user's consent; sign in again with them: "
                + "AcquireTokenInteractive (or SignInWithPassword/StartSignIn)\(with) (single sign-on could not get "
                + "them without a person: \(singleSignOn); the refresh was refused: \(refusal.message))")
    }

    /// Why single sign-on gave no tokens.
    enum SingleSignOnRefusal: Error {
        /// No sign-in on the device made a grant for the account.
        case noGrant
        /// The provider offers no mechanism.
        case notOffered
        /// Offered, but the grant holds nothing these mechanisms take.
        case nothingUsable([SingleSignOnMechanism])
        /// Each mechanism tried was refused, in words.
        case refused([String])
    }

    /// The mechanisms in order until one gives tokens (adopted for the app); a refusal passes to
    /// the next. `widening` is the app's own refresh token when it holds one already, refused for
    /// these scopes: then the app may be the grant's anchor, and the new refresh token replaces it.
    private func trySingleSignOn(
        clientId: String, scopes requested: Scopes, account: Account, widening: String?, correlationId: String,
        startGeneration: UInt64
    ) async throws(BrokerFailure) -> Result<AppTokens, SingleSignOnRefusal> {
        let state = self.state
        guard let grant = state.singleSignOn[account.identifier],
            singleSignOnAccount(account.identifier, in: state) != nil
        else { return .failure(.noGrant) }
        // Single sign-on is a sign-in of this app too: it asks for the app's default scopes.
        let scopes = signInScopes(requested.values, clientId: clientId)
        let offered = try await singleSignOnOffered(correlationId)
        let anchor = state.clients[grant.anchorClientId]
        let isAnchor = grant.anchorClientId == clientId
        let provider = self.provider
        var refusals: [String] = []
        for mechanism in SingleSignOnMechanism.tryingOrder {
            let attempt: @Sendable () async throws -> ProviderTokens
            switch mechanism {
            case .nativeSSO:
                guard offered.contains(.nativeSSO), let deviceSecret = grant.deviceSecret else { continue }
                attempt = {
                    try await provider.exchangeDeviceSecret(
                        clientId: clientId, deviceSecret: deviceSecret, scopes: scopes)
                }
            case .familyRefreshToken:
                guard grant.family != nil, let familyToken = anchor?.refreshToken else { continue }
                guard !isAnchor else {
                    // The family refresh token is this app's own, just refused for these scopes.
                    if widening != nil {
                        refusals.append(
                            "\(mechanism.rawValue): this app's refresh token is the family's, refused for these "
                                + "scopes already")
                    }
                    continue
                }
                attempt = {
                    try await provider.redeemFamilyRefreshToken(
                        clientId: clientId, refreshToken: familyToken, scopes: scopes)
                }
            case .tokenExchange:
                // The anchor exchanging its own token (RFC 8693 lets a client present its own) is
                // worth it only for scopes beyond its grant: otherwise it holds a refresh token.
                guard offered.contains(.tokenExchange), !isAnchor || widening != nil,
                    let subject = anchor.flatMap({ exchangeSubject(of: $0) })
                else { continue }
                attempt = { try await provider.exchangeToken(clientId: clientId, subject: subject, scopes: scopes) }
            }
            do {
                let tokens = try await callProvider(correlationId, attempt)
                logger.info(
                    "tokens through single sign-on",
                    metadata: [
                        "clientId": "\(clientId)", "mechanism": "\(mechanism.rawValue)",
                        "correlationId": "\(correlationId)",
                    ])
                return .success(
                    try adoptSingleSignOn(
                        tokens, clientId: clientId, scopes: scopes, account: account, replacing: widening,
                        correlationId: correlationId, startGeneration: startGeneration))
            } catch  where error.code == .interactionRequired {
                logger.info(
                    "single sign-on refused",
                    metadata: [
                        "clientId": "\(clientId)", "mechanism": "\(mechanism.rawValue)",
                        "correlationId": "\(correlationId)",
                    ])
                refusals.append("\(mechanism.rawValue): \(error.message)")
            }
        }
        if refusals.isEmpty && offered.isEmpty && grant.family == nil { return .failure(.notOffered) }
        if refusals.isEmpty {
            // Offered, but this sign-in holds nothing it takes: a device secret lost with
            // `--token-storage memory`, say, or the signing-in app's own tokens gone.
            return .failure(.nothingUsable(offered.union(grant.family == nil ? [] : [.familyRefreshToken]).sorted()))
        }
        return .failure(.refused(refusals))
    }

    /// The signing-in app's token an RFC 8693 exchange presents: a live access token, else its
    /// refresh token (after a restart access tokens are gone: they are kept in memory only).
    private nonisolated func exchangeSubject(of anchor: ClientRecord) -> SubjectToken? {
        let now = clock.now()
        let live = anchor.accessTokens.values
            .filter {
                let (lifeLeft, overflowed) = $0.expiresOn.subtractingReportingOverflow(now)
                return !overflowed && lifeLeft > configuration.expiryMarginSeconds
            }
            .max { $0.expiresOn < $1.expiresOn }
        if let live { return .accessToken(live.accessToken) }
        return anchor.refreshToken.map(SubjectToken.refreshToken)
    }

    /// Stores the app's new tokens; a new device secret or a family the provider named updates the grant.
    /// `replacing` is the app's refresh token that was refused for these scopes, when it held one.
    private func adoptSingleSignOn(
        _ tokens: ProviderTokens, clientId: String, scopes: Scopes, account: Account, replacing: String?,
        correlationId: String, startGeneration: UInt64
    ) throws(BrokerFailure) -> AppTokens {
        guard generation == startGeneration, singleSignOnAccount(account.identifier, in: state) == account else {
            throw BrokerFailure(
                .noAccount, "\(account.username) was signed out while single sign-on got this app's token")
        }
        guard tokens.account.identifier == account.identifier else {
            throw BrokerFailure(
                .serverError,
                "the provider answered single sign-on for \(account.username) with another user "
                    + "(\(tokens.account.username))"
            )
        }
        var next = state
        var record = next.clients[clientId] ?? ClientRecord()
        if record.account?.identifier != account.identifier { record.dropTokens() }
        record.account = account
        var retired: String?
        if let replacing {
            // The new refresh token covers the wider scopes. Without one (an exchange need not
            // issue it) the old one stays: it still serves its own scopes, and these are got
            // again through single sign-on when this token expires. A sign-in of the app while
            // the exchange ran gave a newer grant, which stays.
            if let issued = tokens.refreshToken {
                retired = record.refreshToken == replacing ? replacing : issued
                if record.refreshToken == replacing { record.refreshToken = issued }
            }
        } else {
            // An exchange may issue no refresh token: then the next expiry exchanges again.
            record.refreshToken = tokens.refreshToken
        }
        record.accessTokens[scopes.joined] = CachedAccessToken(
            accessToken: tokens.accessToken, expiresOn: tokens.expiresOn, idToken: tokens.idToken, scopes: scopes)
        next.clients[clientId] = record
        next.singleSignOn[account.identifier]?.update(with: tokens, from: clientId)
        // A refresh token nobody holds any more is revoked rather than left valid at the provider.
        // Not in a family: a provider may revoke a family's tokens together, the other apps' and
        // the family refresh token with them; those end with the device's sign-out.
        let owed =
            retired.flatMap { token in
                next.singleSignOn[account.identifier]?.family == nil && tokens.family == nil
                    ? [PendingRevocation(clientId: clientId, token: .refreshToken(token))] : nil
            } ?? []
        next.owe(owed)
        try commit(next)
        if !owed.isEmpty { Task { await self.revokeOwed(owed) } }
        return AppTokens(
            accessToken: tokens.accessToken, expiresOn: tokens.expiresOn, idToken: tokens.idToken,
            scopes: scopes, account: account, authority: provider.authority, correlationId: correlationId)
    }

    /// The mechanisms the provider advertises, from its discovery document (read once).
    private func singleSignOnOffered(_ correlationId: String) async throws(BrokerFailure) -> Set<SingleSignOnMechanism>
    {
        let provider = self.provider
        return try await callProvider(correlationId) { try await provider.singleSignOnSupport() }
    }

    /// The mechanisms known so far, for `GetDeviceInformation` (which never waits for the
    /// network): those the provider's discovery document advertises once a call has read it, and
    /// family refresh tokens once a token response showed them.
    nonisolated func knownSingleSignOn() -> [SingleSignOnMechanism]? {
        let familyInState = state.singleSignOn.values.contains { $0.family != nil }
        // Remembered past the grant that showed it: a sign-out does not change the provider.
        let familySeen = singleSignOnFamilySeen.withLock { seen in
            if familyInState { seen = true }
            return seen
        }
        guard var offered = provider.singleSignOnSupportIfKnown else { return nil }
        if familySeen { offered.insert(.familyRefreshToken) }
        return offered.sorted()
    }
}

extension SingleSignOnGrant {
    /// Takes what a token response of `clientId` adds to single sign-on: a device secret (a new
    /// one replaces the old, as the provider may rotate it) and a family, which makes that
    /// app's refresh token the family refresh token when the grant had none.
    mutating func update(with tokens: ProviderTokens, from clientId: String) {
        if let secret = tokens.deviceSecret, let idToken = tokens.idToken {
            deviceSecret = DeviceSecret(secret: secret, idToken: idToken)
        }
        if let family = tokens.family, tokens.refreshToken != nil, self.family == nil || anchorClientId == clientId {
            anchorClientId = clientId
            self.family = family
        }
    }
}
