import Foundation

/// A private session bus (`dbus-daemon`), never the developer's own.
package final class PrivateBus: @unchecked Sendable {
    package let address: String
    private let daemon: ChildProcess

    /// The text of a bus configuration with the standard session policy. `serviceDirectory` is
    /// its only place for D-Bus activation (none: it can activate nothing, not even the system's
    /// services); `everyUser` admits connections of any user, not only the daemon's own;
    /// `sessionType` off leaves activated services only `DBUS_STARTER_ADDRESS`.
    package static func configuration(
        listen: String = "unix:tmpdir=/tmp", sessionType: Bool = true,
        serviceDirectory: String? = nil, everyUser: Bool = false
    ) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          \(sessionType ? "<type>session</type>" : "")
          <listen>\(listen)</listen>
          <auth>EXTERNAL</auth>
          \(serviceDirectory.map { "<servicedir>\($0)</servicedir>" } ?? "")
          <policy context="default">
            \(everyUser ? "<allow user=\"*\"/>" : "")
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """
    }

    /// A `--session` bus, or one run with the configuration file `configFile`; `environment` is
    /// added to the bus's, which the services it activates inherit.
    package init(configFile: String? = nil, environment: [String: String] = [:]) throws {
        daemon = try ChildProcess(
            "dbus-daemon", executable: "/usr/bin/dbus-daemon",
            arguments: [
                configFile.map { "--config-file=\($0)" } ?? "--session",
                "--nofork", "--nopidfile", "--print-address=1",
            ], environment: environment)
        address = try daemon.waitForLine(timeout: .seconds(10)) { $0.contains("unix:") || $0.contains("tcp:") }
            .trimmingCharacters(in: .whitespaces)
    }

    /// Ends the bus: every connection to it is dropped.
    package func stop() { daemon.kill() }

    deinit { daemon.kill() }
}
