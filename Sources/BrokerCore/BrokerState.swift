/// Everything the broker remembers: one value, replaced whole by each change and saved by the
/// `StateStore`. What of it is kept across restarts, and in which file format, is the store's
/// concern (brokerd's `FileStateStore`): access tokens, for one, live in memory only.
public struct BrokerState: Sendable, Equatable {
    /// Stable for the life of the state; `GetDeviceInformation`'s `deviceId`.
    public var deviceId: String
    /// The device's signed-in account in shared mode.
    public var current: Account?
    /// Per clientId: what it saw last, its own account (default mode) and its tokens.
    public var clients: [String: ClientRecord]
    /// Per account `identifier`: what lets other apps get tokens of their own for that account
    /// without a person. In shared mode there is at most one, the device's sign-in.
    public var singleSignOn: [String: SingleSignOnGrant]
    /// Tokens of sign-ins that ended whose revocation the provider has not confirmed yet: kept
    /// (with the other tokens, as secrets) until it does, so that neither a crash nor an outage
    /// leaves them valid at the provider. Oldest first.
    public var pendingRevocations: [PendingRevocation]
    /// The boot (the kernel's boot id) the device's sign-in was made in, when it is known.
    public var signedInBoot: String?
    /// When the device's sign-in was made (unix seconds): a provider's word that a session ended
    /// before it (a sign-out event delivered late, or again) is about an earlier sign-in.
    public var signedInAt: Int64?
    /// While the person is warned of a sign-out after inactivity: when it happens (unix seconds).
    /// Kept, so that a broker killed during the warning neither forgets nor extends it.
    public var signOutDeadline: Int64?
    /// The ids (`jti`) of the provider's last events brokerd acted on, newest last, at most
    /// ``Broker/handledEventsKept``. A transmitter delivers an event again until it is
    /// acknowledged, and the acknowledgement goes with the next poll: one brokerd did not live to
    /// send is delivered again after a restart, and must not end a sign-in made since.
    public var handledEvents: [String]
    /// A sign-out of the device was written and the administrator's clean-up list has not been
    /// done since: owed with the sign-out, so that a broker killed before it does it at its next
    /// start, before anyone is served.
    public var cleanUpOwed: Bool

    public init(
        deviceId: String, current: Account? = nil, clients: [String: ClientRecord] = [:],
        singleSignOn: [String: SingleSignOnGrant] = [:], pendingRevocations: [PendingRevocation] = [],
        signedInBoot: String? = nil, signOutDeadline: Int64? = nil, signedInAt: Int64? = nil,
        handledEvents: [String] = [], cleanUpOwed: Bool = false
    ) {
        self.handledEvents = handledEvents
        self.cleanUpOwed = cleanUpOwed
        self.signedInBoot = signedInBoot
        self.signedInAt = signedInAt
        self.signOutDeadline = signOutDeadline
        self.deviceId = deviceId
        self.current = current
        self.clients = clients
        self.singleSignOn = singleSignOn
        self.pendingRevocations = pendingRevocations
    }
}

/// A token the broker owes the provider a revocation of (RFC 7009), with the client it was issued to.
public struct PendingRevocation: Sendable, Equatable {
    public var clientId: String
    public var token: RevocableToken

    public init(clientId: String, token: RevocableToken) {
        self.clientId = clientId
        self.token = token
    }
}

/// A sign-in that other apps may build on: made by the sign-in of one app (the anchor), it lets
/// the broker get any other app tokens issued to that app, through whichever of the provider's
/// mechanisms the sign-in supports (``SingleSignOnMechanism``).
public struct SingleSignOnGrant: Sendable, Equatable {
    /// The app whose sign-in made the grant. Its refresh token is the family refresh token when
    /// ``family`` is set, and its tokens are the subject of an OAuth 2.0 token exchange.
    public var anchorClientId: String
    /// OpenID Connect Native SSO: the device secret and the ID token it was issued with.
    public var deviceSecret: DeviceSecret?
    /// The family the anchor's refresh token belongs to (Entra's `foci`), when it is a family
    /// refresh token that other clients of the family may redeem.
    public var family: String?

    public init(anchorClientId: String, deviceSecret: DeviceSecret? = nil, family: String? = nil) {
        self.anchorClientId = anchorClientId
        self.deviceSecret = deviceSecret
        self.family = family
    }
}

/// OpenID Connect Native SSO's proof of the device's sign-in: both halves are presented together
/// in a token exchange, and both are secrets kept with the refresh tokens.
public struct DeviceSecret: Sendable, Equatable {
    public var secret: String
    /// The ID token whose `ds_hash` binds it to ``secret``: the exchange's subject token.
    public var idToken: String

    public init(secret: String, idToken: String) {
        self.secret = secret
        self.idToken = idToken
    }
}

/// What the broker keeps for one clientId.
///
/// A value, kept in one shared box until it is changed (copy on write): the broker copies its
/// state for every change, and with many apps known a copy of the table then costs one reference
/// per app instead of one per string; two records from the same box are equal at once.
public struct ClientRecord: Sendable, Equatable {
    /// Changed only while this record holds the one reference to it (`unique()`), so it is
    /// never changed while shared, between threads or otherwise.
    private final class Storage: @unchecked Sendable {
        var lastSeen: Account?
        var account: Account?
        var refreshToken: String?
        var accessTokens: [String: CachedAccessToken]

        init(
            lastSeen: Account?, account: Account?, refreshToken: String?, accessTokens: [String: CachedAccessToken]
        ) {
            self.lastSeen = lastSeen
            self.account = account
            self.refreshToken = refreshToken
            self.accessTokens = accessTokens
        }

        func copy() -> Storage {
            Storage(lastSeen: lastSeen, account: account, refreshToken: refreshToken, accessTokens: accessTokens)
        }
    }

    private var storage: Storage

    private mutating func unique() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    /// What this clientId got as `current` from its last `GetCurrentAccount`: its next `previous`.
    public var lastSeen: Account? {
        get { storage.lastSeen }
        set { unique().lastSeen = newValue }
    }
    /// The account this clientId signed in with and holds tokens for.
    public var account: Account? {
        get { storage.account }
        set { unique().account = newValue }
    }
    /// Refresh tokens belong to the clientId they were issued to, never shared with another.
    public var refreshToken: String? {
        get { storage.refreshToken }
        set { unique().refreshToken = newValue }
    }
    /// Access tokens by the normalized scope string they were asked for. Kept in memory only:
    /// they are short-lived, and after a restart the refresh token gets new ones.
    public var accessTokens: [String: CachedAccessToken] {
        get { storage.accessTokens }
        set { unique().accessTokens = newValue }
    }

    public init(
        lastSeen: Account? = nil, account: Account? = nil, refreshToken: String? = nil,
        accessTokens: [String: CachedAccessToken] = [:]
    ) {
        storage = Storage(lastSeen: lastSeen, account: account, refreshToken: refreshToken, accessTokens: accessTokens)
    }

    public static func == (lhs: ClientRecord, rhs: ClientRecord) -> Bool {
        lhs.storage === rhs.storage
            || (lhs.lastSeen == rhs.lastSeen && lhs.account == rhs.account && lhs.refreshToken == rhs.refreshToken
                && lhs.accessTokens == rhs.accessTokens)
    }

    /// Whether the two hold the same at rest (access tokens are not kept there).
    public func sameAtRest(as other: ClientRecord) -> Bool {
        storage === other.storage
            || (lastSeen == other.lastSeen && account == other.account && refreshToken == other.refreshToken)
    }

    /// Whether nothing is left worth keeping (the record can be dropped).
    var isEmpty: Bool { lastSeen == nil && account == nil && refreshToken == nil && accessTokens.isEmpty }

    /// Forget the account and every token, keep what the app saw last.
    mutating func dropTokens() {
        account = nil
        refreshToken = nil
        accessTokens = [:]
    }
}

/// An access token and what came with it.
public struct CachedAccessToken: Sendable, Equatable {
    public var accessToken: String
    /// Unix seconds.
    public var expiresOn: Int64
    public var idToken: String?
    public var scopes: Scopes

    public init(accessToken: String, expiresOn: Int64, idToken: String?, scopes: Scopes) {
        self.accessToken = accessToken
        self.expiresOn = expiresOn
        self.idToken = idToken
        self.scopes = scopes
    }
}
