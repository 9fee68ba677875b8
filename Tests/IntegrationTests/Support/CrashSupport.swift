import DBus
import Foundation
import TestSupport

// Support for CrashRecoveryTests and ActivationTests: brokerd's state file as the tests read it,
// a reproducible random source, private buses with D-Bus activation, and the repository's files.

/// `state.json` as written by brokerd, read by the test without going through the broker (so
/// reading it changes nothing). Compared canonically: keys sorted, empty records dropped.
struct StateFileSnapshot: CustomStringConvertible {
    let object: [String: Any]

    /// The state in `directory` (its state file with the journal's changes), or nil when there is none.
    static func read(in directory: String) throws -> StateFileSnapshot? {
        try StateOnDisk.json(in: directory).map(StateFileSnapshot.init(object:))
    }

    /// `state.json.broken-*` files: the broker found a state file it could not use.
    static func brokenFiles(in directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
            $0.hasPrefix("state.json.broken-")
        }.sorted()
    }

    var deviceId: String? { object["deviceId"] as? String }
    var current: String? { (object["current"] as? [String: Any])?["username"] as? String }
    var clients: [String: [String: Any]] { object["clients"] as? [String: [String: Any]] ?? [:] }

    func lastSeen(_ client: String) -> String? {
        (clients[client]?["lastSeen"] as? [String: Any])?["username"] as? String
    }
    func account(_ client: String) -> String? {
        (clients[client]?["account"] as? [String: Any])?["username"] as? String
    }
    func refreshToken(_ client: String) -> String? { clients[client]?["refreshToken"] as? String }
    func accessTokenCount(_ client: String) -> Int { (clients[client]?["accessTokens"] as? [String: Any])?.count ?? 0 }
    /// Whether the client holds an account or any token.
    func holdsTokens(_ client: String) -> Bool {
        account(client) != nil || refreshToken(client) != nil || accessTokenCount(client) > 0
    }

    /// The canonical text of the state without `current` (when `withoutCurrent`) and without the
    /// given fields of the given clients ("*" for every client); client records left empty (or
    /// holding only an empty `accessTokens`) are dropped, as the broker drops them.
    func canonical(withoutCurrent: Bool = false, without fields: [String: Set<String>] = [:]) -> String {
        var object = self.object
        // Revocations owed to the provider are settled in the background, across kills and
        // restarts, whatever the operation (OwedRevocationTests checks them).
        object["pendingRevocations"] = nil
        // The device's sign-in: its account, and the single sign-on grant that belongs to it.
        if withoutCurrent {
            object["current"] = nil
            object["singleSignOn"] = nil
            object["signedInBoot"] = nil
            object["signedInAt"] = nil
        }
        var clients: [String: Any] = [:]
        for (id, record) in self.clients {
            var record = record
            for field in fields[id, default: []].union(fields["*", default: []]) { record[field] = nil }
            if (record["accessTokens"] as? [String: Any])?.isEmpty == true { record["accessTokens"] = nil }
            if !record.isEmpty { clients[id] = record }
        }
        object["clients"] = clients
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    var description: String { canonical() }

    static let tokenFields: Set<String> = ["account", "refreshToken", "accessTokens"]
}

/// The repository's root (for the Makefile and the templates), from this file's place in it.
enum Repository {
    static let root: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .path
}

/// A private `dbus-daemon` run with a configuration of the test's own, for D-Bus activation:
/// its only service directory is `serviceDirectory`, never the system's.
final class ActivatingBus: @unchecked Sendable {
    let address: String
    let daemon: ChildProcess

    /// - Parameter sessionType: whether the configuration says `<type>session</type>`. Without
    ///   it dbus-daemon gives activated services only `DBUS_STARTER_ADDRESS`, not
    ///   `DBUS_SESSION_BUS_ADDRESS` (theirs stays the test's `disabled:`).
    init(in directory: TemporaryDirectory, serviceDirectory: String, sessionType: Bool) throws {
        let config = try directory.write(
            "activating-bus.conf",
            PrivateBus.configuration(
                listen: "unix:dir=\(directory.path)", sessionType: sessionType, serviceDirectory: serviceDirectory))
        daemon = try ChildProcess(
            "dbus-daemon (activating)", executable: "/usr/bin/dbus-daemon",
            arguments: ["--config-file=\(config)", "--nofork", "--nopidfile", "--print-address=1"])
        address = try daemon.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("unix:") }.trimmingCharacters(
            in: .whitespaces)
    }

    deinit { daemon.kill() }

    /// The pid of the process that owns `name` on this bus (`GetConnectionUnixProcessID`).
    func ownerPID(of name: String) throws -> Int32 {
        let connection = try DBusConnection(address: address)
        defer { connection.close() }
        let reply = try connection.callBlocking(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "GetConnectionUnixProcessID",
            arguments: [.string(name)], timeout: .seconds(5))
        guard case .uint32(let pid)? = reply.first else {
            throw ProcessFailure("GetConnectionUnixProcessID gave \(reply)")
        }
        return Int32(pid)
    }

    /// Whether `name` has an owner on this bus.
    func hasOwner(_ name: String) throws -> Bool {
        let connection = try DBusConnection(address: address)
        defer { connection.close() }
        let reply = try connection.callBlocking(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "NameHasOwner",
            arguments: [.string(name)], timeout: .seconds(5))
        guard case .bool(let owned)? = reply.first else { throw ProcessFailure("NameHasOwner gave \(reply)") }
        return owned
    }
}

/// A short-lived command, run to its end: its whole output is in once the exit is seen.
final class CommandProcess: @unchecked Sendable {
    private let child: ChildProcess

    init(
        _ name: String, executable: String, arguments: [String], stdin: String? = nil,
        environment: [String: String] = [:]
    ) throws {
        child = try ChildProcess(
            name, executable: executable, arguments: arguments, environment: environment, stdin: stdin ?? "")
    }

    /// Waits at most `timeout` for the exit (killing the command after it); then the output is complete.
    func waitForExit(timeout: Duration) throws -> CommandResult {
        let status = try child.waitForExit(timeout: timeout)
        return CommandResult(status: status, stdout: child.stdoutText, stderr: child.stderrText)
    }
}

/// Runs `brokerctl ARGS --address ADDRESS` to completion (bounded).
func runBrokerctl(
    _ arguments: [String], address: String, stdin: String? = nil,
    timeout: Duration = .seconds(30)
) throws -> CommandResult {
    try CommandProcess(
        "brokerctl", executable: Binaries.path("brokerctl"),
        arguments: arguments + ["--address", address], stdin: stdin
    ).waitForExit(timeout: timeout)
}

/// Runs `make ARGS` in the repository (bounded).
func runMake(_ arguments: [String]) throws -> CommandResult {
    try CommandProcess("make", executable: "/usr/bin/make", arguments: ["-C", Repository.root] + arguments)
        .waitForExit(timeout: .seconds(60))
}

extension ActivatingBus {
    /// Subscribes to `NameOwnerChanged` for `name`, runs `action` (a signal to its owner), and
    /// waits at most `timeout` for the name to lose its owner.
    func waitForRelease(of name: String, timeout: Duration, after action: () throws -> Void) async throws {
        let connection = try DBusConnection(address: address)
        defer { connection.close() }
        let changes = try await connection.signals(
            matching: DBusMatchRule(
                sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameOwnerChanged", arg0: name))
        try action()
        let released =
            await within(timeout) {
                await changes.first { $0.arguments.count == 3 && $0.arguments[2].string == "" } != nil
            } ?? false
        guard released else { throw ProcessFailure("\(name) was not released within \(timeout)") }
    }
}
