import BrokerAPI
import Foundation
import TestSupport
import Testing

/// Who may call the broker: its own user only, and, for a clientId the configuration binds to
/// executables, only those programs. And the administrator's device mode wins.
@Suite("Callers and the administrator's configuration")
struct CallerPolicyTests {
    static var isRoot: Bool { getuid() == 0 }

    @Test("a clientId bound to executables serves those programs only; other clientIds serve anyone")
    func executableBinding() throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write(
            "brokerd.json",
            """
            {"clients": [{"clientId": "mail-app", "allowedExecutables": ["\(Binaries.path("brokerctl"))"]},
                         {"clientId": "calendar-app"}]}
            """)
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(TestUsers.alice.username))

        let stranger = try env.gdbusCall(.getCurrentAccount, ["mail-app"])
        #expect(stranger.status != 0)
        #expect(stranger.stderr.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(stranger.stderr)")
        #expect(stranger.stderr.contains("gdbus"), "the refusal names the caller's program: \(stranger.stderr)")
        let signOut = try env.gdbusCall(.signOut, ["mail-app", "", "{}"])
        #expect(signOut.stderr.contains("io.shareddevice.Broker1.Error.AccessDenied"), "\(signOut.stderr)")

        // An unbound clientId serves gdbus; the device is still signed in.
        let other = try env.gdbusCall(.getCurrentAccount, ["calendar-app"])
        #expect(other.status == 0, "\(other.stderr)")
        #expect(other.stdout.contains(TestUsers.alice.username))
    }

    @Test(
        "a connection kept open across an exec, or handed over and left by its opener, gets no bound clientId's token"
    )
    func handedConnection() throws {
        // The allowed program is a copy of Python (so that the attacker's script runs in it); the
        // attacker's own program is the system's Python, another executable file.
        let directory = try TemporaryDirectory()
        let python = "/usr/bin/python3"
        let allowed = directory.path + "/kiosk-app"
        try copyExecutable(URL(fileURLWithPath: python).resolvingSymlinksInPath().path, to: allowed)
        let config = try directory.write(
            "brokerd.json",
            #"{"clients": [{"clientId": "notes-app", "allowedExecutables": ["\#(allowed)"]}, {"clientId": "mail-app"}]}"#
        )
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        let script = Repository.root + "/Tests/Hostile/handed_connection.py"

        // The allowed program is served, then execs another program that keeps the connection.
        let exec = try ChildProcess(
            "kiosk-app, then exec", executable: allowed,
            arguments: [script, "exec", env.bus.address, "notes-app", python])
        try exec.waitForLine { $0.hasPrefix("after exec:") }
        #expect(try exec.waitForExit(timeout: .seconds(30)) == 0, "\(exec.stderrText)")
        #expect(exec.stdoutText.contains("checked program: answer with a token"), "\(exec.stdoutText)")
        #expect(
            exec.stdoutText.contains("after exec: error io.shareddevice.Broker1.Error.AccessDenied"),
            "\(exec.stdoutText)")
        #expect(exec.stdoutText.contains("has run another program"), "\(exec.stdoutText)")

        // The allowed program hands its connection to another one (SCM_RIGHTS). While the opener
        // is there, the receiver is served: peer credentials bind a connection, not the code that
        // uses it (broker.conf(5) says so). Once the opener is gone, the connection is refused.
        let receiver = try ChildProcess(
            "receiver", executable: python, arguments: [script, "receive", env.bus.address, "notes-app", allowed])
        try receiver.waitForLine { $0.hasPrefix("handed over, its opener gone:") }
        #expect(try receiver.waitForExit(timeout: .seconds(30)) == 0, "\(receiver.stderrText)")
        let lines = receiver.stdoutText
        #expect(lines.contains("checked program: answer with a token"), "\(lines)")
        #expect(lines.contains("handed over, its opener still there: answer with a token"), "\(lines)")
        #expect(
            lines.contains("handed over, its opener gone: error io.shareddevice.Broker1.Error.AccessDenied"),
            "\(lines)")
        #expect(lines.contains("has exited"), "\(lines)")

        // Standard error is read on a thread of its own: waited for, not read at once.
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("refused a connection whose process exited or ran another program")
        }
        // Nothing changed: the device is still signed in.
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(TestUsers.alice.username))
    }

    @Test("a clientId bound to brokerctl serves every brokerctl command: it is one program")
    func boundToBrokerctl() throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write(
            "brokerd.json",
            """
            {"clients": [{"clientId": "mail-app", "allowedExecutables": ["\(Binaries.path("brokerctl"))"]}]}
            """)
        let env = try BrokerEnvironment(brokerArguments: ["--config", config])
        let signIn = try env.signIn(TestUsers.alice, client: "mail-app")
        #expect(signIn.status == 0, "\(signIn.stderr)")
        let token = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(token.status == 0, "\(token.stderr)")
        let read = try env.brokerctl(["current-account", "--client-id", "mail-app", "--json"])
        #expect(read.status == 0 && read.stdout.contains(TestUsers.alice.username), "\(read.stderr)")
        let signOut = try env.brokerctl(["sign-out", "--client-id", "mail-app"])
        #expect(signOut.status == 0, "\(signOut.stderr)")
    }

    @Test("a --config file brokerd refuses stops the start at once, with status 1, before anything is written")
    func userConfigurationRefused() throws {
        let directory = try TemporaryDirectory()
        // What another user (or app) who could write the file would set.
        let takeover = #"{"authority": "https://attacker.example/v2.0", "allowPasswordGrant": true}"#
        let writable = try directory.write("writable.json", takeover)
        #expect(chmod(writable, 0o666) == 0)
        let fifo = directory.path + "/fifo.json"
        #expect(mkfifo(fifo, 0o600) == 0)
        let everyApp = try directory.write("null.json", #"{"clients": null}"#)
        let twice = try directory.write(
            "twice.json", #"{"clients": [{"clientId": "a", "allowedExecutables": ["/usr/bin/a"]}], "clients": []}"#)
        for (index, (config, why)) in [
            (writable, "\(writable) must belong to this user (uid \(getuid())) or root and be writable by nobody else"),
            (fifo, "\(fifo) is a named pipe (FIFO), not a regular file"),
            (everyApp, "\(everyApp) has null for clients"),
            (twice, #"\#(twice) has the key "clients" twice at the top level"#),
        ].enumerated() {
            let state = directory.path + "/state-\(index)"
            let brokerd = try ChildProcess(
                "brokerd", executable: Binaries.path("brokerd"),
                arguments: [
                    "--address", "unix:path=\(directory.path)/no-bus", "--authority", "http://127.0.0.1:9",
                    "--state-dir", state, "--config", config,
                ])
            #expect(try brokerd.waitForExit(timeout: .seconds(10)) == 1, "\(config)")
            #expect(brokerd.stderrText.contains("brokerd: the configuration file \(why)"), "\(brokerd.stderrText)")
            #expect(!FileManager.default.fileExists(atPath: state), "brokerd wrote its state for \(config)")
        }
    }

    @Test(
        "a caller of another user is refused with AccessDenied, on a bus that lets it connect",
        .enabled(if: isRoot, "needs root to run a client as another user"))
    func otherUserRefused() throws {
        // A bus that admits every user (a session bus admits only its own): the broker's own check must hold.
        let env = try BrokerEnvironment(busConfig: PrivateBus.configuration(everyUser: true))
        #expect(try env.signIn(TestUsers.alice, client: "mail-app").status == 0)
        for method in [
            [Broker1Method.getCurrentAccount.rawValue, "string:mail-app"],
            [Broker1Method.getDeviceInformation.rawValue],
            [Broker1Method.getAccounts.rawValue, "string:mail-app"],
        ] {
            let call = try ChildProcess(
                "dbus-send as nobody", executable: "/usr/bin/setpriv",
                arguments: [
                    "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/dbus-send",
                    "--bus=\(env.bus.address)",
                    "--print-reply", "--reply-timeout=5000", "--dest=io.shareddevice.Broker1",
                    "/io/shareddevice/Broker1",
                    "io.shareddevice.Broker1.\(method[0])",
                ] + method.dropFirst())
            #expect(try call.waitForExit(timeout: .seconds(10)) != 0, "\(method[0])")
            #expect(
                call.stderrText.contains("io.shareddevice.Broker1.Error.AccessDenied"),
                "\(method[0]): \(call.stderrText)")
        }
        // Nothing changed, and the broker's own user is still served.
        #expect(
            try env.brokerctl(["current-account", "--client-id", "mail-app"]).stdout.contains(TestUsers.alice.username))
    }

    @Test(
        "the administrator's configuration sets the device mode over --config and --device-mode",
        .enabled(if: isRoot, "needs root to make a root-owned file that is not the real /etc one"))
    func administratorWins() throws {
        let directory = try TemporaryDirectory()
        let admin = try directory.write("admin.conf", #"{"deviceMode": "default"}"#)
        chmod(admin, 0o644)
        let user = try directory.write("user.json", #"{"deviceMode": "shared"}"#)
        let env = try BrokerEnvironment(mode: "shared", brokerArguments: ["--config", user, "--admin-config", admin])
        let info = try env.brokerctl(["device-info", "--json"]).json()
        #expect(info["deviceMode"] as? String == "default")
        try env.brokerd.process.waitForLine(timeout: .seconds(10), stderr: true) {
            $0.contains("the administrator's configuration sets the device mode")
        }

        // A file someone else could have written is no administrator's: brokerd refuses to start.
        chown(admin, 65534, 65534)
        let refused = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", env.bus.address, "--authority", env.idp.authority, "--state-dir",
                directory.path + "/state2",
                "--admin-config", admin,
            ])
        #expect(try refused.waitForExit(timeout: .seconds(10)) == 1)
        #expect(
            refused.stderrText.contains("must belong to root and be writable by nobody else"), "\(refused.stderrText)")
        chown(admin, 0, 0)
        chmod(admin, 0o666)
        let writable = try ChildProcess(
            "brokerd", executable: Binaries.path("brokerd"),
            arguments: [
                "--address", env.bus.address, "--authority", env.idp.authority, "--state-dir",
                directory.path + "/state3",
                "--admin-config", admin,
            ])
        #expect(try writable.waitForExit(timeout: .seconds(10)) == 1)
        #expect(writable.stderrText.contains("mode 666"), "\(writable.stderrText)")
    }
}
