import BrokerAPI
import Foundation
import TestSupport
import Testing

/// D-Bus activation (docs/reliability.md, "Activation"): the session bus starts brokerd on the
/// first call, and `make install` puts the activation file and the systemd user unit where the
/// bus and systemd look, naming the installed brokerd.
@Suite("Activation: the bus starts brokerd on the first call; the installed files", .serialized)
struct ActivationTests {
    /// An activation file whose Exec= runs the built brokerd with the test's provider and state
    /// directory, and no --address: brokerd must find the bus on its own.
    private func writeServiceFile(in directory: TemporaryDirectory, authority: String, stateDirectory: String) throws
        -> String
    {
        let services = directory.path + "/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        try """
        [D-BUS Service]
        Name=\(BrokerNames.busName)
        Exec=\(Binaries.path("brokerd")) --authority \(authority) --state-dir \(stateDirectory) --token-storage plaintext-file --log-level debug
        """.write(toFile: services + "/\(BrokerNames.busName).service", atomically: true, encoding: .utf8)
        return services
    }

    @Test("the first call starts brokerd; it serves the bus that started it", arguments: [true, false])
    func firstCallStartsTheBroker(sessionType: Bool) async throws {
        // sessionType false: dbus-daemon gives the service DBUS_STARTER_ADDRESS only, and its
        // DBUS_SESSION_BUS_ADDRESS stays the test's "disabled:", so brokerd must use the former.
        let directory = try TemporaryDirectory()
        let idp = try IdpSim(in: directory)
        let stateDirectory = directory.path + "/state"
        let services = try writeServiceFile(in: directory, authority: idp.authority, stateDirectory: stateDirectory)
        let bus = try ActivatingBus(in: directory, serviceDirectory: services, sessionType: sessionType)
        #expect(try bus.hasOwner(BrokerNames.busName) == false)

        let started = ContinuousClock.now
        let info = try runBrokerctl(["device-info", "--json"], address: bus.address, timeout: .seconds(30))
        let took = ContinuousClock.now - started
        #expect(info.status == 0, "\(info.stderr)\n\(bus.daemon.allOutput)")
        #expect(try info.json()["authority"] as? String == idp.authority)
        print(
            "activation (\(sessionType ? "<type>session</type>" : "DBUS_STARTER_ADDRESS only")): the first call was "
                + "answered after \(String(format: "%.0f", took.seconds * 1000)) ms"
        )
        // The bus's log says it started the service, and brokerd (whose output is the bus's) got ready.
        try bus.daemon.waitForLine(timeout: .seconds(5)) { $0.hasPrefix("brokerd ready:") }
        #expect(
            bus.daemon.stderrText.contains("Successfully activated service '\(BrokerNames.busName)'"),
            "\(bus.daemon.stderrText)")
        #expect(FileManager.default.fileExists(atPath: stateDirectory))

        // The same broker answers the next calls, and it does its work.
        let pid = try bus.ownerPID(of: BrokerNames.busName)
        let signIn = try runBrokerctl(
            [
                "sign-in", "--client-id", "mail-app", "--username", TestUsers.alice.username,
                "--password-stdin", "--json",
            ], address: bus.address, stdin: TestUsers.alice.password + "\n")
        #expect(signIn.status == 0, "\(signIn.stderr)")
        #expect(try bus.ownerPID(of: BrokerNames.busName) == pid)

        // SIGTERM: it releases the name; the next call starts a new one, on the same state.
        try await bus.waitForRelease(of: BrokerNames.busName, timeout: .seconds(15)) {
            guard kill(pid, SIGTERM) == 0 else {
                throw ProcessFailure("kill \(pid): \(String(cString: strerror(errno)))")
            }
        }
        let seen = try runBrokerctl(
            ["current-account", "--client-id", "mail-app", "--json"], address: bus.address, timeout: .seconds(30))
        #expect(seen.status == 0, "\(seen.stderr)")
        #expect((try seen.json()["current"] as? [String: Any])?["username"] as? String == TestUsers.alice.username)
        let second = try bus.ownerPID(of: BrokerNames.busName)
        #expect(second != pid)
        try await bus.waitForRelease(of: BrokerNames.busName, timeout: .seconds(15)) {
            guard kill(second, SIGTERM) == 0 else {
                throw ProcessFailure("kill \(second): \(String(cString: strerror(errno)))")
            }
        }
    }

    @Test(
        "make install-data: the activation file and the user unit, where `make install` puts them, naming PREFIX/bin/brokerd"
    )
    func installedFiles() throws {
        let directory = try TemporaryDirectory()
        let stage = directory.path + "/stage"
        let make = try runMake(["install-data", "DESTDIR=\(stage)", "PREFIX=/usr"])
        try #require(make.status == 0, "\(make.stdout)\n\(make.stderr)")

        let service = stage + "/usr/share/dbus-1/services/io.shareddevice.Broker1.service"
        let unit = stage + "/usr/lib/systemd/user/shared-device-broker.service"
        let interface = stage + "/usr/share/dbus-1/interfaces/io.shareddevice.Broker1.xml"
        for file in [service, unit, interface] {
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            #expect(attributes[.posixPermissions] as? Int == 0o644, "\(file)")
        }
        let serviceText = try String(contentsOfFile: service, encoding: .utf8)
        let serviceLines = serviceText.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") }
        #expect(
            serviceLines == [
                "[D-BUS Service]", "Name=io.shareddevice.Broker1", "Exec=/usr/bin/brokerd",
                "SystemdService=shared-device-broker.service",
            ])
        let unitText = try String(contentsOfFile: unit, encoding: .utf8)
        let settings = unitText.split(separator: "\n").map(String.init).filter {
            !$0.hasPrefix("#") && $0.contains("=")
        }
        for expected in [
            "Type=dbus", "BusName=io.shareddevice.Broker1", "ExecStart=/usr/bin/brokerd", "Restart=on-failure",
            "StartLimitIntervalSec=60", "StartLimitBurst=5", "NoNewPrivileges=yes", "LockPersonality=yes",
            "SystemCallArchitectures=native", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
            "MemoryDenyWriteExecute=yes", "RestrictNamespaces=yes",
        ] {
            #expect(settings.contains(expected), "\(expected) missing from \(unit)")
        }
        #expect(!serviceText.contains("@PREFIX@") && !unitText.contains("@PREFIX@"))
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: interface))
                == Data(contentsOf: URL(fileURLWithPath: Repository.root + "/dbus/io.shareddevice.Broker1.xml")))
    }

    @Test(
        "the installed activation file works: with PREFIX in a temporary directory, the bus starts PREFIX/bin/brokerd")
    func installedActivationFileStartsTheBroker() async throws {
        let directory = try TemporaryDirectory()
        let prefix = directory.path + "/prefix"
        let make = try runMake(["install-data", "PREFIX=\(prefix)"])
        try #require(make.status == 0, "\(make.stdout)\n\(make.stderr)")
        // PREFIX/bin/brokerd: the built brokerd with this test's provider and state directory
        // (what the administrator's configuration gives an installed one).
        let idp = try IdpSim(in: directory)
        try installBrokerdWrapper(in: prefix, authority: idp.authority, stateDirectory: directory.path + "/state")

        let unit = prefix + "/lib/systemd/user/shared-device-broker.service"
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            // The unit as systemd reads it: no unknown keys, an ExecStart that exists.
            let runtime = directory.path + "/runtime"
            try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
            chmod(runtime, 0o700)
            let verify = try ChildProcess(
                "systemd-analyze", executable: "/usr/bin/systemd-analyze",
                arguments: ["verify", "--user", unit], environment: ["XDG_RUNTIME_DIR": runtime])
            #expect(try verify.waitForExit(timeout: .seconds(30)) == 0, "\(verify.allOutput)")
            #expect(verify.stderrText.isEmpty, "systemd-analyze verify: \(verify.stderrText)")
        } else {
            print("skipped: systemd-analyze is not installed, the unit's syntax is not checked")
        }

        let bus = try ActivatingBus(
            in: directory, serviceDirectory: prefix + "/share/dbus-1/services", sessionType: true)
        let info = try runBrokerctl(["device-info", "--json"], address: bus.address, timeout: .seconds(30))
        #expect(info.status == 0, "\(info.stderr)\n\(bus.daemon.allOutput)")
        #expect(try info.json()["authority"] as? String == idp.authority)
        let pid = try bus.ownerPID(of: BrokerNames.busName)
        try await bus.waitForRelease(of: BrokerNames.busName, timeout: .seconds(15)) {
            guard kill(pid, SIGTERM) == 0 else {
                throw ProcessFailure("kill \(pid): \(String(cString: strerror(errno)))")
            }
        }
    }

    @Test(
        "make install-microsoft-broker1 (opt-in): an app of Microsoft's broker protocol starts brokerd by that name"
    )
    func microsoftBrokerActivation() async throws {
        let directory = try TemporaryDirectory()
        let prefix = directory.path + "/prefix"
        for target in ["install-data", "install-microsoft-broker1"] {
            let make = try runMake([target, "PREFIX=\(prefix)"])
            try #require(make.status == 0, "\(make.stdout)\n\(make.stderr)")
        }
        let units = prefix + "/lib/systemd/user"
        #expect(
            try FileManager.default.destinationOfSymbolicLink(
                atPath: units + "/dbus-com.microsoft.identity.broker1.service") == "shared-device-broker.service")
        let dropIn = try String(
            contentsOfFile: units + "/shared-device-broker.service.d/microsoft-broker1.conf", encoding: .utf8)
        #expect(dropIn.contains("ExecStart=\(prefix)/bin/brokerd --compat microsoft-broker1"), "\(dropIn)")
        let service = prefix + "/share/dbus-1/services/com.microsoft.identity.broker1.service"
        let serviceLines = try String(contentsOfFile: service, encoding: .utf8).split(separator: "\n")
            .map(String.init).filter { !$0.hasPrefix("#") }
        #expect(
            serviceLines == [
                "[D-BUS Service]", "Name=\(MicrosoftBroker1Names.busName)",
                "Exec=\(prefix)/bin/brokerd --compat microsoft-broker1",
                "SystemdService=dbus-com.microsoft.identity.broker1.service",
            ])

        // PREFIX/bin/brokerd: the built brokerd with this test's provider and state directory.
        let idp = try IdpSim(in: directory, tenant: TestUsers.guidTenant)
        try installBrokerdWrapper(in: prefix, authority: idp.authority, stateDirectory: directory.path + "/state")

        let bus = try ActivatingBus(
            in: directory, serviceDirectory: prefix + "/share/dbus-1/services", sessionType: true)
        // What Microsoft's client library does first: Ping the object, which starts the broker.
        let ping = try await runCommand(
            "/usr/bin/gdbus",
            [
                "call", "--address", bus.address, "--dest", MicrosoftBroker1Names.busName, "--object-path",
                MicrosoftBroker1Names.objectPath, "--method", "org.freedesktop.DBus.Peer.Ping",
            ], timeout: .seconds(30))
        #expect(ping.status == 0, "\(ping.stderr)\n\(bus.daemon.allOutput)")
        // One brokerd owns both names.
        let pid = try bus.ownerPID(of: MicrosoftBroker1Names.busName)
        #expect(try bus.ownerPID(of: BrokerNames.busName) == pid)
        try await bus.waitForRelease(of: BrokerNames.busName, timeout: .seconds(15)) {
            guard kill(pid, SIGTERM) == 0 else {
                throw ProcessFailure("kill \(pid): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// PREFIX/bin/brokerd: the built brokerd with the test's provider and state directory (what the
    /// administrator's configuration gives an installed one), passing on its own arguments.
    private func installBrokerdWrapper(in prefix: String, authority: String, stateDirectory: String) throws {
        try FileManager.default.createDirectory(atPath: prefix + "/bin", withIntermediateDirectories: true)
        let wrapper = prefix + "/bin/brokerd"
        try """
        #!/bin/sh
        exec '\(Binaries.path("brokerd"))' --authority '\(authority)' --state-dir '\(stateDirectory)' --token-storage plaintext-file "$@"
        """.write(toFile: wrapper, atomically: true, encoding: .utf8)
        #expect(chmod(wrapper, 0o755) == 0)
    }
}
