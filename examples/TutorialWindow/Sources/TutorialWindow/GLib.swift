import CGtk
import Glibc

/// GTK lives on the main thread; everything else (the broker's calls, the account stream) runs in
/// Swift tasks. These are the two ways across: ``onMain(_:)`` to reach GTK, and ``Signals`` for
/// GTK's callbacks to reach Swift closures.
enum GtkThread {
    /// Runs `body` on GTK's main context, soon; the caller does not wait.
    static func onMain(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Closure(body)).toOpaque()
        tw_idle_once(
            { raw in
                guard let raw else { return tw_source_remove() }
                Unmanaged<Closure>.fromOpaque(raw).takeRetainedValue().body()
                return tw_source_remove()
            }, box)
    }

    private final class Closure: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
}

/// GTK signal handlers as Swift closures: each connection keeps its closure until GTK drops the
/// handler (the widget is destroyed).
enum Signals {
    private final class Handler {
        let body: (UnsafeMutableRawPointer?) -> Void
        init(_ body: @escaping (UnsafeMutableRawPointer?) -> Void) { self.body = body }
    }

    /// Connects `body` to `signal` of `instance`. `withArgument`: the signal passes one argument
    /// besides the instance (GAction's `activate`, `notify::PROPERTY`), which the C callback must
    /// take so that its data pointer is found.
    static func connect(
        _ instance: UnsafeMutableRawPointer?, _ signal: String, withArgument: Bool = false,
        _ body: @escaping () -> Void
    ) {
        connect(instance, signal, withArgument: withArgument) { _ in body() }
    }

    /// As above, `body` getting the signal's argument (a GAction's parameter, a GParamSpec).
    static func connect(
        _ instance: UnsafeMutableRawPointer?, _ signal: String, withArgument: Bool,
        _ body: @escaping (UnsafeMutableRawPointer?) -> Void
    ) {
        let data = Unmanaged.passRetained(Handler(body)).toOpaque()
        let release: GClosureNotify = { data, _ in
            guard let data else { return }
            Unmanaged<Handler>.fromOpaque(data).release()
        }
        if withArgument {
            tw_signal_connect_with_argument(
                instance, signal,
                { _, argument, data in
                    guard let data else { return }
                    Unmanaged<Handler>.fromOpaque(data).takeUnretainedValue().body(argument)
                }, data, release)
        } else {
            tw_signal_connect(
                instance, signal,
                { _, data in
                    guard let data else { return }
                    Unmanaged<Handler>.fromOpaque(data).takeUnretainedValue().body(nil)
                }, data, release)
        }
    }
}

/// The translation of `text` (gettext, the tutorial's domain).
func tr(_ text: String) -> String {
    // gettext answers the very pointer it was given when it has no translation: read it while it lives.
    text.withCString { String(cString: tw_gettext($0)) }
}

/// Sets up gettext: the locale from the environment (LANG, LC_*, LANGUAGE) and the catalogues
/// from `directory`.
func setUpTranslations(directory: String) {
    setlocale(LC_ALL, "")
    bindtextdomain("tutorial-window", directory)
    bind_textdomain_codeset("tutorial-window", "UTF-8")
}

/// A C string argument for the duration of a GTK call.
func withC<R>(_ text: String, _ body: (UnsafePointer<CChar>) -> R) -> R { text.withCString(body) }
