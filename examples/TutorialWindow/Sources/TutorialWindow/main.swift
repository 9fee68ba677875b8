import CGtk
import Foundation
import SharedDeviceClient

// The iOS shared-device tutorial's app as a GTK 4 window (docs/porting-ios-tutorial.md):
// several instances with different --client-id and --app-name act as different apps on one device.
//
// Usage: tutorial-window [--client-id ID] [--app-name NAME] [--address BUS] [--graph URL]

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

if CommandLine.arguments.contains("--help") {
    print(
        """
        tutorial-window: the shared-device tutorial app, a GTK 4 window on the broker.
        Usage: tutorial-window [--client-id ID] [--app-name NAME] [--address BUS] [--graph URL]
          --client-id   the app's client id (default mail-app)
          --app-name    the window's title and application id suffix (default Mail)
          --address     the bus the broker is on (default: the session bus)
          --graph       the Graph-like API's base URL (default: from the broker's authority)
        Actions on the bus: app.sign-out, app.call-graph, app.refresh, app.screenshot(PATH).
        """)
    exit(0)
}

let clientId = option("--client-id") ?? "mail-app"
let appName = option("--app-name") ?? "Mail"

let executableDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    .deletingLastPathComponent().path
setUpTranslations(
    directory: ProcessInfo.processInfo.environment["TUTORIAL_WINDOW_LOCALEDIR"] ?? executableDirectory + "/locale")

guard gtk_init_check() != 0 else {
    FileHandle.standardError.write(
        Data("tutorial-window: no display to open a window on (is DISPLAY or WAYLAND_DISPLAY set?)\n".utf8))
    exit(1)
}

let broker: PublicClientApplication
do {
    broker = try PublicClientApplication(
        clientId: clientId, configuration: BrokerClientConfiguration(busAddress: option("--address")))
} catch {
    FileHandle.standardError.write(Data("tutorial-window: \(error)\n".utf8))
    exit(1)
}

exit(TutorialApplication.run(appName: appName, clientId: clientId, broker: broker, graphBase: option("--graph")))

/// The GApplication: one application id per app name, so that two windows are two applications,
/// each with its actions (`app.sign-out`, `app.call-graph`, `app.refresh`) exported on the bus at
/// /io/shareddevice/Tutorial/NAME, as GNOME apps do.
enum TutorialApplication {
    private final class State: @unchecked Sendable {
        var window: TutorialWindow?
    }

    static func run(appName: String, clientId: String, broker: PublicClientApplication, graphBase: String?) -> Int32 {
        let suffix = String(appName.filter { $0.isLetter || $0.isNumber }.prefix(64))
        let id = "io.shareddevice.Tutorial.\(suffix.isEmpty ? "App" : suffix)"
        guard let application = adw_application_new(id, G_APPLICATION_DEFAULT_FLAGS) else { return 1 }
        let object = UnsafeMutableRawPointer(application)
        let state = State()

        func addAction(_ name: String, _ body: @escaping (TutorialWindow) -> Void) {
            guard let action = g_simple_action_new(name, nil) else { return }
            Signals.connect(UnsafeMutableRawPointer(action), "activate", withArgument: true) {
                if let window = state.window { body(window) }
            }
            g_action_map_add_action(OpaquePointer(object), action)
        }
        // app.screenshot(PATH): the window as a PNG (tests, the README's picture).
        if let action = g_simple_action_new("screenshot", tw_variant_type_string()) {
            Signals.connect(UnsafeMutableRawPointer(action), "activate", withArgument: true) { parameter in
                guard let window = state.window, let parameter else { return }
                let path = String(cString: g_variant_get_string(OpaquePointer(parameter), nil))
                if tw_save_png(window.window, path) == 0 { window.log("cannot save a screenshot to \(path)") }
            }
            g_action_map_add_action(OpaquePointer(object), action)
        }
        addAction("sign-out") { $0.signOut() }
        addAction("call-graph") { $0.callGraph() }
        addAction("refresh") { $0.loadCurrentAccount() }

        Signals.connect(object, "activate") {
            if let window = state.window {
                gtk_window_present(window.window.as(GtkWindow.self))
                return
            }
            let window = TutorialWindow(
                application: object.assumingMemoryBound(to: GtkApplication.self), broker: broker, appName: appName,
                graphBase: graphBase)
            state.window = window
            window.log(String(format: tr("%@ (client id %@)"), appName, clientId))
            window.followAccountChanges()
            window.followSignOutWarnings()
            window.loadCurrentAccount()
            gtk_window_present(window.window.as(GtkWindow.self))
        }
        // Only the program's name: GApplication must not read our options.
        return g_application_run(object.assumingMemoryBound(to: GApplication.self), 1, CommandLine.unsafeArgv)
    }
}
