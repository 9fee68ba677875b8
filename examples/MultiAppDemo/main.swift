import ExampleSupport
import Foundation

// The multi-app demo (`make demo`): a private session bus, idp-sim and brokerd in shared mode, and
// three apps (Mail, Calendar, Notes), each its own process. Mail signs alice in, all three show
// her; Calendar and Notes, which never signed in, each get a token of their own silently (single
// sign-on) and call the Graph-like /v1.0/me with it; Calendar signs out, all three show the
// sign-out, each with the time the AccountChanged signal took to reach it, and then no app gets a
// token. Exits 0 when every step did what it should, 1 otherwise, and stops every process it
// started on every way out (Ctrl-C too).
//
// Usage: multi-app-demo [--bin-dir DIR] [--users FILE] [--username U] [--password P]

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

let binDir =
    option("--bin-dir")
    ?? {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: exe).deletingLastPathComponent().path
    }()
let usersFile = option("--users") ?? "examples/demo-users.json"
let username = option("--username") ?? "alice@contoso.example"
let password = option("--password") ?? "alice-Demo-Passw0rd"
let apps = [
    (name: "Mail", clientId: "mail-app"), (name: "Calendar", clientId: "calendar-app"),
    (name: "Notes", clientId: "notes-app"),
]
let width = apps.map(\.name.count).max() ?? 8

func say(_ who: String, _ text: String) {
    emit("[\(who)]" + String(repeating: " ", count: max(0, width - who.count)) + " \(text)")
}

/// `key=value` from a line of the apps' protocol.
func field(_ key: String, in line: String) -> String? {
    line.split(separator: " ").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
}

/// Milliseconds between two CLOCK_MONOTONIC readings (one clock for all processes on Linux).
func milliseconds(from start: String?, to end: String?) -> String {
    guard let start = start.flatMap(UInt64.init), let end = end.flatMap(UInt64.init), end >= start else { return "?" }
    return String(format: "%.1f ms", Double(end - start) / 1e6)
}

var latencies: [String: [String]] = [:]
var tokenTimes: [String] = []

/// Tells `process` to call Graph with a silent token; `expectSuccess` false: it must be refused.
@MainActor
func callGraph(_ process: ManagedProcess, expectSuccess: Bool) throws {
    let mark = process.output.count
    process.send("graph")
    let line = try process.waitForLine(from: mark, timeout: 30) { $0.hasPrefix("graph ") || $0.hasPrefix("error") }
    if expectSuccess {
        guard line.hasPrefix("graph ") else {
            throw DemoFailure("\(process.name) could not call Graph: \(line.dropFirst(6))")
        }
        let name = (field("name", in: line) ?? "?").replacingOccurrences(of: "_", with: " ")
        let token = field("token", in: line) ?? "?"
        tokenTimes.append("\(process.name) \(token) ms")
        say(
            process.name,
            "got a token of its own silently in \(token) ms; Graph /v1.0/me says \(name) "
                + "(\(field("me", in: line) ?? "?") ms)"
        )
    } else {
        guard line.hasPrefix("error") else {
            throw DemoFailure("\(process.name) still got a token after the sign-out: \(line)")
        }
        say(process.name, "gets no token: \(line.dropFirst(6))")
    }
}

/// Tells `actor` to run `command` and waits until every app reports the change `reason`.
@MainActor
func change(
    _ reason: String, by actor: ManagedProcess, command: [String], expect showing: String,
    processes: [ManagedProcess]
) throws {
    let marks = processes.map { $0.output.count }
    command.forEach(actor.send)
    let sendingVerb = reason == "signed-in" ? "sign-in" : "sign-out"
    let sent = try actor.waitForLine(from: marks[processes.firstIndex { $0 === actor } ?? 0], timeout: 10) {
        $0.hasPrefix("sending \(sendingVerb)")
    }
    let outcome = try actor.waitForLine(from: marks[processes.firstIndex { $0 === actor } ?? 0], timeout: 30) {
        $0 == reason || $0.hasPrefix(reason + " ") || $0.hasPrefix("error")
    }
    if outcome.hasPrefix("error") { throw DemoFailure("\(actor.name): \(outcome.dropFirst(6))") }
    say(actor.name, reason == "signed-in" ? "signed \(showing) in" : "signed out (signoutFromBrowser: shared device)")
    for (index, process) in processes.enumerated() {
        let seen = try process.waitForLine(from: marks[index], timeout: 10) { $0.hasPrefix("saw \(reason) ") }
        guard field("showing", in: seen) == showing else {
            throw DemoFailure("\(process.name) shows \(field("showing", in: seen) ?? "?") instead of \(showing)")
        }
        let latency = milliseconds(from: field("at", in: sent), to: field("at", in: seen))
        latencies[process.name, default: []].append(latency)
        say(process.name, "now shows \(showing)   (AccountChanged arrived \(latency) after the call was sent)")
    }
}

@MainActor
func runDemo() throws {
    let work = NSTemporaryDirectory() + "sdb-demo-\(getpid())"
    try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
    Cleanup.shared.temporaryDirectory = work
    guard FileManager.default.fileExists(atPath: usersFile) else {
        throw DemoFailure("no users file at \(usersFile) (use --users)")
    }

    let bus = try ManagedProcess(
        "dbus-daemon", executable: "/usr/bin/dbus-daemon",
        arguments: ["--session", "--nofork", "--nopidfile", "--print-address=1"],
        stderrFile: work + "/bus.log")
    let address = try bus.waitForLine(timeout: 10) { $0.hasPrefix("unix:") || $0.hasPrefix("tcp:") }
        .trimmingCharacters(in: .whitespaces)
    say("demo", "a private session bus: \(address)")

    let idp = try ManagedProcess(
        "idp-sim", executable: binDir + "/idp-sim", arguments: ["--port", "0", "--users", usersFile],
        stderrFile: work + "/idp-sim.log")
    let listening = try idp.waitForLine(timeout: 60) { $0.hasPrefix("listening on ") }
    let authority =
        String(listening.dropFirst("listening on ".count)).trimmingCharacters(in: .whitespaces) + "/contoso-demo/v2.0"
    say("demo", "idp-sim, a local OpenID Connect provider: \(authority)")

    let brokerd = try ManagedProcess(
        "brokerd", executable: binDir + "/brokerd",
        arguments: [
            "--address", address, "--device-mode", "shared", "--authority", authority, "--state-dir", work + "/state",
            "--token-storage", "memory",  // a throwaway demo: no keyring needed, nothing written
        ], stderrFile: work + "/brokerd.log")
    _ = try brokerd.waitForLine(timeout: 30) { $0.hasPrefix("brokerd ready:") }
    say("demo", "brokerd is ready, in shared device mode")

    var processes: [ManagedProcess] = []
    for app in apps {
        processes.append(
            try ManagedProcess(
                app.name, executable: binDir + "/demo-app",
                arguments: ["--name", app.name, "--client-id", app.clientId, "--address", address],
                stderrFile: work + "/\(app.clientId).log"))
    }
    for process in processes {
        let ready = try process.waitForLine(timeout: 15) { $0.hasPrefix("ready ") || $0.hasPrefix("error") }
        guard let showing = field("showing", in: ready) else { throw DemoFailure("\(process.name): \(ready)") }
        say(process.name, "started (pid \(process.pid)), shows \(showing), listening for AccountChanged")
    }
    let mail = processes[0]
    let calendar = processes[1]

    say("demo", "Mail signs \(username) in with a password")
    try change(
        "signed-in", by: mail, command: ["signin \(username)", password], expect: username, processes: processes)

    say("demo", "Calendar and Notes never signed in: each asks for a token silently and calls Graph")
    for process in processes.dropFirst() { try callGraph(process, expectSuccess: true) }

    say("demo", "Calendar signs out: on a shared device that signs the whole device out")
    try change("signed-out", by: calendar, command: ["signout"], expect: "nobody", processes: processes)
    for process in processes { try callGraph(process, expectSuccess: false) }

    for process in processes { process.send("quit") }
    for process in processes where !process.waitForExit(timeout: 5) {
        throw DemoFailure("\(process.name) did not quit")
    }

    let lines = apps.map { app in "\(app.name) \((latencies[app.name] ?? []).joined(separator: " / "))" }.joined(
        separator: ", ")
    emit("")
    say(
        "demo",
        """
        Summary: three separate processes (Mail, Calendar, Notes) shared one broker on a private \
        bus. Mail signed \(username) in and every app showed that user at once; Calendar and Notes \
        got tokens of their own without signing in (single sign-on: \(tokenTimes.joined(separator: ", "))) \
        and Graph accepted them; Calendar signed out and every app, Mail and Notes included, showed \
        nobody, without polling: each heard the broker's AccountChanged signal (sign-in / sign-out \
        delay after the call was sent: \(lines)), and no app got a token after it. Every app saw \
        every change.
        """)
}

Cleanup.shared.installSignalHandlers()
do {
    try runDemo()
    Cleanup.shared.run()
    exit(0)
} catch {
    say("demo", "FAILED: \(error)")
    Cleanup.shared.run()
    exit(1)
}
