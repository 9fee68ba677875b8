import Foundation

/// A private session bus (`dbus-daemon`), never the developer's own.
package final class PrivateBus: @unchecked Sendable {
    package let address: String
    private let daemon: ChildProcess

    /// The text of a bus configuration with the standard session policy and limits (those of
    /// Debian's session.conf, which a desktop's session bus runs with). `serviceDirectory` is
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
          <limit name="max_incoming_bytes">1000000000</limit>
          <limit name="max_incoming_unix_fds">250000000</limit>
          <limit name="max_outgoing_bytes">1000000000</limit>
          <limit name="max_outgoing_unix_fds">250000000</limit>
          <limit name="max_message_size">1000000000</limit>
          <limit name="service_start_timeout">120000</limit>
          <limit name="auth_timeout">240000</limit>
          <limit name="pending_fd_timeout">150000</limit>
          <limit name="max_completed_connections">100000</limit>
          <limit name="max_incomplete_connections">10000</limit>
          <limit name="max_connections_per_user">100000</limit>
          <limit name="max_pending_service_starts">10000</limit>
          <limit name="max_names_per_connection">50000</limit>
          <limit name="max_match_rules_per_connection">50000</limit>
          <limit name="max_replies_per_connection">50000</limit>
          <policy context="default">
            \(everyUser ? "<allow user=\"*\"/>" : "")
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """
    }

    /// A bus run with the configuration file `configFile`, or by default with ``configuration()``:
    /// a session bus that activates nothing. The machine's own session configuration would start
    /// whatever the machine has installed (xdg-desktop-portal, gnome-keyring) on the first call to
    /// its name, so a test would measure that machine's services, which may take the whole of a
    /// call's timeout to start. `environment` is added to the bus's, which the services it
    /// activates inherit.
    package init(configFile: String? = nil, environment: [String: String] = [:]) throws {
        let file: String
        if let configFile {
            file = configFile
            ownConfigFile = nil
        } else {
            file = try Self.writeTemporary(Self.configuration())
            ownConfigFile = file
        }
        daemon = try ChildProcess(
            "dbus-daemon", executable: "/usr/bin/dbus-daemon",
            arguments: ["--config-file=\(file)", "--nofork", "--nopidfile", "--print-address=1"],
            environment: environment)
        address = try daemon.waitForLine(timeout: .seconds(10)) { $0.contains("unix:") || $0.contains("tcp:") }
            .trimmingCharacters(in: .whitespaces)
    }

    /// The default configuration's file, removed with the bus.
    private let ownConfigFile: String?

    private static func writeTemporary(_ text: String) throws -> String {
        var template = Array("/tmp/sdb-bus-XXXXXX.conf".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress.map { mkstemps($0, 5) } ?? -1
        }
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let path = String(cString: template)
        defer { close(fd) }
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            unlink(path)
            throw POSIXError(.EIO)
        }
        return path
    }

    /// Ends the bus: every connection to it is dropped.
    package func stop() { daemon.kill() }

    deinit {
        daemon.kill()
        if let ownConfigFile { unlink(ownConfigFile) }
    }
}
