import Foundation

/// The terminal side of the app: whether a person is typing, and reading a secret without echo.
enum Terminal {
    /// Whether standard input is a terminal (a person) rather than a script.
    static var isInteractive: Bool { isatty(STDIN_FILENO) == 1 }

    /// Turns echo off (for a password) or back on, when standard input is a terminal.
    static func setEcho(_ on: Bool) {
        guard isInteractive else { return }
        var settings = termios()
        guard tcgetattr(STDIN_FILENO, &settings) == 0 else { return }
        if on { settings.c_lflag |= tcflag_t(ECHO) } else { settings.c_lflag &= ~tcflag_t(ECHO) }
        tcsetattr(STDIN_FILENO, TCSANOW, &settings)
    }
}
