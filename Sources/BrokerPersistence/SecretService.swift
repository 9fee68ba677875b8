import DBus
import Locking

/// A small client of the freedesktop Secret Service API (`org.freedesktop.secrets`, as served by
/// gnome-keyring, KeePassXC or KWallet), over the project's own D-Bus layer, on a connection of
/// its own.
///
/// Every call is synchronous (`DBusConnection.callBlocking`): the broker writes its state from
/// `StateStore.save`, which must be done when it returns. The connection's thread delivers each
/// reply, so waiting never needs Swift's cooperative pool. It never shows a prompt: what would
/// need one (an unlock, a new keyring's password) is an error saying what a person can do.
///
/// Secrets travel in a `plain` session: the session bus belongs to this user alone (its socket
/// admits only this uid, and only this uid may monitor it), so anyone who could read the secret
/// off the bus could already read the keyring. The `dh-ietf1024-sha256-aes128-cbc-pkcs7`
/// algorithm would only protect against that same user, at the cost of a Diffie-Hellman and AES
/// implementation here.
final class SecretService: Sendable {
    static let busName = "org.freedesktop.secrets"
    static let servicePath = "/org/freedesktop/secrets"
    static let serviceInterface = "org.freedesktop.Secret.Service"
    static let collectionInterface = "org.freedesktop.Secret.Collection"
    static let itemInterface = "org.freedesktop.Secret.Item"
    static let promptInterface = "org.freedesktop.Secret.Prompt"

    /// What to tell a person who cannot, or will not, make the Secret Service usable: the
    /// setting where the storage was chosen.
    let alternatives: String

    let connection: DBusConnection
    let timeout: Duration
    /// The open session and the default collection, found once and forgotten after a failure
    /// (the service may have restarted: its sessions and paths are then gone).
    private let cache = Locked<(session: String?, collection: String?)>((nil, nil))

    init(connection: DBusConnection, timeout: Duration = .seconds(10), origin: TokenStorageOrigin = .builtIn) {
        self.connection = connection
        self.alternatives = origin.alternatives
        self.timeout = timeout
    }

    deinit { connection.close() }

    /// Whether the default keyring is locked, asked without blocking a thread (for the watch of a
    /// keyring locked at start, ``LockedKeyring``). A service without a default keyring counts
    /// as locked: nothing can be read yet.
    func defaultCollectionIsLocked() async throws -> Bool {
        let alias =
            try await connection.call(
                destination: Self.busName, path: Self.servicePath, interface: Self.serviceInterface,
                member: "ReadAlias", arguments: [.string("default")], timeout: timeout
            ).first?.objectPath ?? "/"
        guard alias != "/" else { return true }
        let locked = try await connection.call(
            destination: Self.busName, path: alias, interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(Self.collectionInterface), .string("Locked")], timeout: timeout)
        return locked.first?.bool ?? true
    }

    /// Whether a Secret Service runs on the bus or the bus can start one (D-Bus activation).
    func isAvailable() throws(SecretServiceError) -> Bool {
        do {
            let owned = try busCall("NameHasOwner", [.string(Self.busName)]).first?.bool ?? false
            if owned { return true }
            let activatable = try busCall("ListActivatableNames", []).first?.stringArray ?? []
            return activatable.contains(Self.busName)
        } catch {
            throw .failed("cannot ask the bus whether a Secret Service (\(Self.busName)) is there: \(error)")
        }
    }

    /// The secret of the first item of the default collection with exactly these `attributes`,
    /// or nil when there is none.
    func read(attributes: [String: String]) throws(SecretServiceError) -> [UInt8]? {
        try retryingOnce { () throws(SecretServiceError) -> [UInt8]? in
            let collection = try defaultCollection()
            guard let item = try search(collection, attributes).first else { return nil }
            let session = try session()
            let reply = try call(
                item, Self.itemInterface, "GetSecret", [.objectPath(session)], doing: "read the tokens' item")
            guard let fields = reply.first?.structureFields, fields.count == 4, let elements = fields[2].arrayElements
            else {
                throw .failed(
                    "the Secret Service answered GetSecret with something that is not a secret "
                        + "(\(reply.first?.signature ?? "nothing"))"
                )
            }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(elements.count)
            for element in elements {
                guard let byte = element.byte else { throw .failed("the Secret Service's secret is not a byte array") }
                bytes.append(byte)
            }
            return bytes
        }
    }

    /// Stores `secret` in the default collection under `attributes`, replacing the item that has
    /// exactly these attributes.
    func write(label: String, attributes: [String: String], secret: [UInt8], contentType: String)
        throws(SecretServiceError)
    {
        try retryingOnce { () throws(SecretServiceError) in
            let collection = try defaultCollection()
            let session = try session()
            let properties: DBusValue = .vardict([
                "org.freedesktop.Secret.Item.Label": .string(label),
                "org.freedesktop.Secret.Item.Attributes": .stringDict(attributes),
            ])
            let value: DBusValue = .structure([
                .objectPath(session),
                .array(elementSignature: "y", []),  // no parameters in a plain session
                .array(elementSignature: "y", secret.map { .byte($0) }),
                .string(contentType),
            ])
            let reply = try call(
                collection, Self.collectionInterface, "CreateItem", [properties, value, .bool(true)],
                doing: "store the tokens")
            let item = reply.first?.objectPath ?? "/"
            let prompt = reply.dropFirst().first?.objectPath ?? "/"
            if item == "/" {
                guard prompt != "/" else {
                    throw .failed("the Secret Service did not store the tokens' item and gave no reason")
                }
                // A prompt here means the keyring got locked since we looked: unlocking it is a prompt.
                dismiss(prompt)
                throw lockedError(collection)
            }
        }
    }

    /// Deletes every item of the default collection with exactly these `attributes`.
    func delete(attributes: [String: String]) throws(SecretServiceError) {
        try retryingOnce { () throws(SecretServiceError) in
            let collection = try defaultCollection()
            for item in try search(collection, attributes) {
                let prompt =
                    try call(item, Self.itemInterface, "Delete", [], doing: "delete the tokens' item").first?.objectPath
                    ?? "/"
                if prompt != "/" {
                    dismiss(prompt)
                    throw .failed(
                        "the Secret Service wants to ask before deleting the tokens' item \(item); "
                            + "brokerd shows no prompts. Delete it with your keyring app, \(alternatives)")
                }
            }
        }
    }

    // MARK: Pieces

    /// Runs `body`; when it fails because the service lost our session or objects (it restarted),
    /// forgets them and runs it once more.
    private func retryingOnce<T>(_ body: () throws(SecretServiceError) -> T) throws(SecretServiceError) -> T {
        do {
            return try body()
        } catch {
            cache.withLock { $0 = (nil, nil) }
            guard error.isStale else { throw error }
            return try body()
        }
    }

    /// A session for `plain` transfers (see the type's comment for why plain is enough here).
    private func session() throws(SecretServiceError) -> String {
        if let session = cache.withLock({ $0.session }) { return session }
        let reply = try call(
            Self.servicePath, Self.serviceInterface, "OpenSession", [.string("plain"), .variant(.string(""))],
            doing: "open a session")
        guard reply.count == 2, let session = reply[1].objectPath, session != "/" else {
            throw .failed("the Secret Service answered OpenSession without a session")
        }
        cache.withLock { $0.session = session }
        return session
    }

    /// The collection the `default` alias names, unlocked. Created (with alias `default`) when
    /// there is none and the service can do so without a prompt.
    private func defaultCollection() throws(SecretServiceError) -> String {
        let collection: String
        if let known = cache.withLock({ $0.collection }) {
            collection = known
        } else {
            let alias =
                try call(
                    Self.servicePath, Self.serviceInterface, "ReadAlias", [.string("default")],
                    doing: "find the default keyring"
                ).first?.objectPath ?? "/"
            collection = alias != "/" ? alias : try createDefaultCollection()
        }
        let locked = try call(
            collection, "org.freedesktop.DBus.Properties", "Get",
            [.string(Self.collectionInterface), .string("Locked")], doing: "ask whether the default keyring is locked")
        guard let isLocked = locked.first?.bool else {
            throw .failed(
                "the Secret Service answered whether \(collection) is locked with "
                    + "\(locked.first?.signature ?? "nothing")"
            )
        }
        if isLocked { throw lockedError(collection) }
        cache.withLock { $0.collection = collection }
        return collection
    }

    private func createDefaultCollection() throws(SecretServiceError) -> String {
        let reply = try call(
            Self.servicePath, Self.serviceInterface, "CreateCollection",
            [.vardict(["org.freedesktop.Secret.Collection.Label": .string("Default keyring")]), .string("default")],
            doing: "create a default keyring")
        let collection = reply.first?.objectPath ?? "/"
        let prompt = reply.dropFirst().first?.objectPath ?? "/"
        guard collection != "/" else {
            dismiss(prompt)
            // Like a locked keyring: nothing can be read or kept yet, everything else is served, and
            // the keyring is used the moment one becomes the default.
            throw .locked(
                "the Secret Service has no default keyring (nobody has made one on this device), and making one "
                    + "needs a prompt for its password that brokerd does not show. Create one and make it the default: "
                    + "in Passwords and Keys (Seahorse), File > New > Password Keyring, then right-click it > Set as "
                    + "Default (or log in once to a desktop session, which makes the login keyring); brokerd uses it "
                    + "at once, \(alternatives)")
        }
        return collection
    }

    /// The items of `collection` with exactly these attributes.
    private func search(_ collection: String, _ attributes: [String: String]) throws(SecretServiceError) -> [String] {
        let reply = try call(
            collection, Self.collectionInterface, "SearchItems", [.stringDict(attributes)],
            doing: "look for the tokens' item")
        return (reply.first?.arrayElements ?? []).compactMap(\.objectPath).filter { $0 != "/" }
    }

    /// The error for a locked keyring, named as the person knows it (its label: "Login", ...).
    private func lockedError(_ collection: String?) -> SecretServiceError {
        let label = collection.flatMap {
            try? call(
                $0, "org.freedesktop.DBus.Properties", "Get", [.string(Self.collectionInterface), .string("Label")],
                doing: "read the keyring's name"
            ).first?.string
        }
        let name =
            label.map { $0.isEmpty ? "the default keyring" : "the \($0.lowercased()) keyring" } ?? "the default keyring"
        return .locked(
            "\(name) is locked; unlock it (log in to the desktop session, or unlock it in your keyring app) "
                + alternatives)
    }

    /// Dismisses a prompt we will not show (best effort, no reply awaited beyond the timeout).
    private func dismiss(_ prompt: String) {
        guard prompt != "/" else { return }
        _ = try? connection.callBlocking(
            destination: Self.busName, path: prompt, interface: Self.promptInterface,
            member: "Dismiss", timeout: timeout)
    }

    private func call(
        _ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue],
        doing what: String
    ) throws(SecretServiceError) -> [DBusValue] {
        do {
            return try connection.callBlocking(
                destination: Self.busName, path: path, interface: interface,
                member: member, arguments: arguments, timeout: timeout)
        } catch let error as DBusError {
            if error.name == "org.freedesktop.Secret.Error.IsLocked" { throw lockedError(nil) }
            throw .call("the Secret Service (\(Self.busName)) could not \(what): \(error)", name: error.name)
        } catch {
            throw .failed("the Secret Service (\(Self.busName)) could not \(what): \(error)")
        }
    }

    private func busCall(_ member: String, _ arguments: [DBusValue]) throws -> [DBusValue] {
        try connection.callBlocking(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: member, arguments: arguments, timeout: timeout)
    }
}

/// Why the Secret Service could not be used. The message says what a person can do; it never
/// holds a secret (error replies are the service's own words about names and paths).
enum SecretServiceError: Error, CustomStringConvertible {
    case locked(String)
    /// A call failed with the D-Bus error `name`.
    case call(String, name: String)
    case failed(String)

    var description: String {
        switch self {
        case .locked(let why), .call(let why, _), .failed(let why): return why
        }
    }

    /// The service no longer knows our session or an object: it restarted or forgot them.
    var isStale: Bool {
        guard case .call(_, let name) = self else { return false }
        return [
            "org.freedesktop.Secret.Error.NoSession", "org.freedesktop.Secret.Error.NoSuchObject",
            "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod",
            "org.freedesktop.DBus.Error.ServiceUnknown",
        ].contains(name)
    }
}
