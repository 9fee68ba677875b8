import DBus
import Glibc

/// The program behind a desktop service brokerd takes the person's inactivity from. On the
/// session bus a well-known name belongs to whichever connection asked for it first, and every
/// program of the user may ask: an app started before the desktop could own the idle monitor's
/// name and never say the person left. brokerd cannot tell such an app from the desktop by the
/// bus alone, so it says who it listens to (the start's log and `idleSource` in the device
/// information), and warns when that is a program the user, or anyone but root, could have
/// written.
struct SourceOwner: Sendable {
    let name: String
    let processId: UInt32?
    let executable: String?
    /// Whether the executable is a file of root's that nobody else can write (a program the
    /// system installed), rather than one an app could have put in place.
    let installedBySystem: Bool

    /// Who owns `name` on `session` now; nil fields when the bus or /proc do not say.
    static func of(_ name: String, on session: DBusConnection) async -> SourceOwner {
        let processId = try? await BusDriver(session).getConnectionUnixProcessID(name, timeout: .seconds(5)).value
        let executable = processId.flatMap(CallerPolicy.executable(of:))
        var installed = false
        if let executable {
            var info = stat()
            installed = stat(executable, &info) == 0 && info.st_uid == 0 && info.st_mode & 0o022 == 0
        }
        return SourceOwner(name: name, processId: processId, executable: executable, installedBySystem: installed)
    }

    /// The program and its process, in words: "served by /usr/bin/mutter (pid 1432)".
    var servedBy: String {
        guard let processId else { return "served by a program brokerd could not identify" }
        return "served by \(executable ?? "an unknown program") (pid \(processId))"
    }
}
