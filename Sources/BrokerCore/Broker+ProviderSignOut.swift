import BrokerAPI

/// What the provider says ended for an account (OpenID CAEP and RISC event types, or the
/// broker's own session check). Each ends the device's sign-in of that account.
public enum ProviderSessionEnd: String, Sendable, CaseIterable {
    /// CAEP `session-revoked`: an administrator or the provider ended the account's sessions.
    case sessionRevoked = "session-revoked"
    /// CAEP `credential-change`: the password or another credential changed (sessions end with it).
    case credentialChange = "credential-change"
    /// RISC `account-disabled`: the account can no longer sign in.
    case accountDisabled = "account-disabled"
    /// The broker's session check: the provider refused the sign-in's refresh token for good.
    case sessionCheck = "session-check"
}

/// Who a provider's event is about, in the forms an account can be recognised by (RFC 9493
/// subject identifiers, read by the Identity layer): sign-in names or e-mail addresses, the
/// provider's ids of the user (Entra's `oid`, or `sub` where the provider has no `oid`), and the
/// directory, when the event names one.
public struct EventSubject: Sendable, Equatable, CustomStringConvertible {
    public var emails: [String]
    public var userIds: [String]
    public var tenant: String?

    public init(emails: [String] = [], userIds: [String] = [], tenant: String? = nil) {
        self.emails = emails
        self.userIds = userIds
        self.tenant = tenant
    }

    /// Whether the event is about `account`: a name or an id matches, and the directory, when
    /// both name one, is the account's.
    public func matches(_ account: Account) -> Bool {
        if let tenant, !tenant.isEmpty, !account.tenantId.isEmpty, tenant != account.tenantId { return false }
        if emails.contains(where: account.hasUsername) { return true }
        return userIds.contains { id in
            !id.isEmpty && (account.identifier == id || account.identifier == "\(id).\(account.tenantId)")
        }
    }

    /// Names and ids as a log line may show them (they identify a person, not a secret).
    public var description: String {
        (emails + userIds).joined(separator: ", ") + (tenant.map { " (tenant \($0))" } ?? "")
    }
}

/// What an event from the provider did on this device.
public enum ProviderEventOutcome: Sendable, Equatable {
    /// The device's sign-in was of that account: it is signed out (cause `provider`).
    case signedOut
    /// Apps held tokens of that account (default mode, or left from before): they are gone.
    case forgotten(apps: Int)
    /// The event is about a session that ended before the device's sign-in was made.
    case olderThanSignIn
    /// Nobody on this device is signed in with that account.
    case notHere
    /// The change could not be made (the state could not be written): the event must come again.
    case notDone(String)
    /// brokerd acted on this event already (it came again, unacknowledged): nothing changes.
    case handledAlready

    /// Whether the event needs nothing more from this device.
    var isDone: Bool {
        if case .notDone = self { return false }
        return true
    }
}

/// Outcome of one check of the device's session (``Broker/checkDeviceSession()``).
public enum SessionCheckOutcome: Sendable, Equatable {
    /// The provider still honours the sign-in.
    case alive
    /// It refused it for good: the device is signed out (cause `provider`).
    case ended
    /// Nothing to check: nobody is signed in, or the sign-in holds no refresh token.
    case nothingToCheck
    /// The provider could not say (down, slow, a server error): the sign-in stays.
    case unknown(String)
}

extension Broker {
    /// Seconds the provider's clock may run behind the device's: an event at most this much older
    /// than the sign-in still ends it, as it may be about the same session.
    static let eventClockSkew: Int64 = 60

    /// How many of the provider's last events brokerd remembers having acted on: far more than
    /// one poll brings, and a transmitter delivers again only what was not acknowledged.
    static let handledEventsKept = 64

    /// The provider says `subject`'s session (or credentials, or account) ended at `eventTime`
    /// (unix seconds, when it says). The device's sign-in of that account ends through the one
    /// sign-out path, with cause `provider`; apps that hold tokens of it otherwise lose them. An
    /// event older than the device's sign-in is about an earlier one and changes nothing, and so
    /// does one brokerd acted on already (`eventId`, the SET's `jti`), delivered again: the clock
    /// skew allowed between the provider and the device would otherwise let an event from before
    /// a restart end a sign-in made in the seconds after it.
    public func providerEnded(
        _ end: ProviderSessionEnd, for subject: EventSubject, at eventTime: Int64?, eventId: String? = nil
    ) async -> ProviderEventOutcome {
        if let eventId, state.handledEvents.contains(eventId) {
            logger.info(
                "the provider delivered again an event brokerd acted on already; nothing changes",
                metadata: ["event": "\(end.rawValue)"])
            return .handledAlready
        }
        let outcome = await act(on: end, for: subject, at: eventTime, eventId: eventId)
        if let eventId, outcome.isDone, !state.handledEvents.contains(eventId) {
            remember(handled: eventId)
        }
        return outcome
    }

    /// Notes `eventId` as acted on. A sign-out notes it in its own write, so that a brokerd
    /// stopped at any point either did not sign out or remembers it did.
    private func remember(handled eventId: String) {
        var next = state
        next.handledEvents = Self.noting(eventId, in: next.handledEvents)
        do {
            try commit(next)
        } catch {
            // Not fatal: the worst a lost note can do is what the skew allowed before.
            logger.warning("could not note a provider event as handled", metadata: ["error": "\(error)"])
        }
    }

    static func noting(_ eventId: String, in handled: [String]) -> [String] {
        Array((handled.filter { $0 != eventId } + [eventId]).suffix(handledEventsKept))
    }

    private func act(on end: ProviderSessionEnd, for subject: EventSubject, at eventTime: Int64?, eventId: String?)
        async -> ProviderEventOutcome
    {
        if configuration.deviceMode == .shared, let current = state.current, subject.matches(current) {
            // A damaged state file may hold any number: the subtraction must not trap.
            if let eventTime, let signedInAt = state.signedInAt,
                case (let earliest, let overflow) = signedInAt.subtractingReportingOverflow(Self.eventClockSkew),
                !overflow,
                eventTime < earliest
            {
                logger.notice(
                    "the provider ended an earlier session of the device's account; the sign-in made since stays",
                    metadata: ["event": "\(end.rawValue)", "account": "\(current.identifier)"])
                return .olderThanSignIn
            }
            logger.notice(
                "the provider ended the session of the device's account: signing the device out",
                metadata: ["event": "\(end.rawValue)", "account": "\(current.identifier)"])
            do {
                _ = try await self.end(
                    current, for: shiftClientId(for: current), fromBrowser: false, cause: .provider,
                    handledEvent: eventId)
                return .signedOut
            } catch {
                // The state could not be written: nothing changed. The event is not acknowledged,
                // so the transmitter delivers it again.
                logger.error(
                    "the provider ended the session, but the device could not be signed out",
                    metadata: ["error": "\(error)"])
                return .notDone(error.message)
            }
        }
        let holders = state.clients.keys.sorted().filter { id in
            state.clients[id]?.account.map(subject.matches) == true
        }
        var forgotten = 0
        for clientId in holders {
            guard let account = state.clients[clientId]?.account else { continue }
            do {
                _ = try await self.end(account, for: clientId, fromBrowser: false, cause: .provider)
                forgotten += 1
            } catch {
                logger.error(
                    "the provider ended a session, but an app's tokens of it could not be dropped",
                    metadata: ["clientId": "\(clientId)", "error": "\(error)"])
                return .notDone(error.message)
            }
        }
        if forgotten > 0 {
            logger.notice(
                "the provider ended a session: the apps' tokens of that account are gone",
                metadata: ["event": "\(end.rawValue)", "apps": "\(forgotten)"])
            return .forgotten(apps: forgotten)
        }
        logger.info(
            "the provider ended a session of an account not signed in here", metadata: ["event": "\(end.rawValue)"])
        return .notHere
    }

    /// Asks the provider whether the device's sign-in still holds. With OpenID Connect Native
    /// SSO, an exchange of the device secret, which spends nothing (the tokens it gives are not
    /// kept). Otherwise one refresh of the refresh token of the app whose sign-in it is, through
    /// the path (one at a time per app) a silent call takes, so it never races an app's own
    /// refresh; the rotated token is kept, and the app has a fresh access token from it. A refusal
    /// for good (`invalid_grant`: the session, the grant or the account is gone) signs the device
    /// out with cause `provider`; a provider that is down, slow or failing changes nothing.
    public func checkDeviceSession() async -> SessionCheckOutcome {
        guard configuration.deviceMode == .shared, let current = state.current else { return .nothingToCheck }
        let clientId = shiftClientId(for: current)
        if let deviceSecret = state.singleSignOn[current.identifier]?.deviceSecret {
            let provider = self.provider
            do {
                _ = try await callProvider(Self.newCorrelationId()) {
                    try await provider.exchangeDeviceSecret(
                        clientId: clientId, deviceSecret: deviceSecret, scopes: Scopes(["openid"]))
                }
                return .alive
            } catch let failure where failure.grantEnded {
                return await sessionEnded(current, failure)
            } catch {
                return .unknown(error.message)
            }
        }
        guard let record = state.clients[clientId], record.refreshToken != nil,
            let scopes = record.accessTokens.values.map(\.scopes).min(by: { $0.joined < $1.joined })
        else { return .nothingToCheck }
        do {
            // The one-at-a-time path: a refresh of this app already on its way is awaited, never
            // raced with the same refresh token (rotation would refuse one of the two).
            _ = try await acquireTokenSilent(
                clientId: clientId, scopes: scopes.values, accountId: current.identifier, forceRefresh: true)
            return .alive
        } catch let failure where failure.grantEnded {
            return await sessionEnded(current, failure)
        } catch {
            return .unknown(error.message)
        }
    }

    /// The check's refusal for good: the device's sign-in (if it is still `account`'s) ends.
    private func sessionEnded(_ account: Account, _ failure: BrokerFailure) async -> SessionCheckOutcome {
        guard state.current?.identifier == account.identifier else { return .nothingToCheck }
        let outcome = await providerEnded(.sessionCheck, for: EventSubject(userIds: [account.identifier]), at: nil)
        return outcome == .signedOut ? .ended : .unknown(failure.message)
    }
}
