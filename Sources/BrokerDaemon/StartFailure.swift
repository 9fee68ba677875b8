import BrokerAPI
import Glibc

/// Why the last start of brokerd failed, kept where the person who meets the failure can be
/// pointed to: started by the session bus (D-Bus activation) rather than by systemd, brokerd's
/// standard error goes wherever the bus's goes, which nobody reads, and the app that asked only
/// hears `Spawn.ChildExited ... status 1`. So a start that fails also writes its message to
/// `StartFailureRecord.fileName` in the default state directory, which the client library (and
/// so brokerctl and every app) reads back to say why; a start that succeeds removes it. Under
/// systemd the journal has the message, and no file is written.
public enum StartFailure {
    /// Writes `message` (and the exit status) for the next client that finds the broker failed,
    /// unless standard error is the journal. Best effort: a failure to write it changes nothing.
    public static func record(
        _ message: String, status: Int32, directory: String = DaemonOptions.defaultStateDirectory()
    ) {
        guard !JournalLogHandler.standardErrorIsJournal else { return }
        var partial = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            partial += "/" + component
            _ = mkdir(partial, 0o700)
        }
        let path = directory + "/" + StartFailureRecord.fileName
        let temporary = path + ".\(getpid()).tmp"
        let text = StartFailureRecord.format(message: message, status: status, pid: getpid(), time: Int64(time(nil)))
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        if written == bytes.count { rename(temporary, path) } else { unlink(temporary) }
    }

    /// A start succeeded: an earlier failure is no longer why the broker is not there.
    public static func clear(directory: String = DaemonOptions.defaultStateDirectory()) {
        unlink(directory + "/" + StartFailureRecord.fileName)
    }
}
