import ExampleSupport
import Foundation
import SharedDeviceClient

// The iOS shared-device tutorial's app, ported to the terminal (see docs/porting-ios-tutorial.md).
//
// A person gets a menu of keys; a script sends one command a line:
//   signin-password USER    (the password on the next line)
//   signin-code USER        (the code on the next line; again after a wrong one)
//   graph | device | signout | refresh | log | quit
// The current account is loaded on start, on SIGCONT (back to the foreground) and on `refresh`.
//
// Usage: tutorial-app [--client-id ID] [--address BUS] [--graph URL]

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

let clientId = option("--client-id") ?? "mail-app"
let menu = "[s] sign in  [g] call Graph  [d] device info  [o] sign out  [r] refresh  [l] log  [q] quit"

let applicationContext: PublicClientApplication
do {
    applicationContext = try PublicClientApplication(
        clientId: clientId, configuration: BrokerClientConfiguration(busAddress: option("--address")))
} catch {
    emit("error: \(error)")
    exit(1)
}
let viewController = ViewController(applicationContext: applicationContext, graphBase: option("--graph"))

// viewDidLoad: load the current account (and the tutorial also reads the device mode).
await viewController.loadCurrentAccount()

// willEnterForeground: SIGCONT, after the app was stopped (Ctrl-Z, fg).
signal(SIGCONT, SIG_IGN)
let foreground = DispatchSource.makeSignalSource(signal: SIGCONT, queue: .global())
foreground.setEventHandler { Task { await viewController.loadCurrentAccount() } }
foreground.resume()

let input = LineInput()
func prompt(_ text: String) -> String? {
    guard Terminal.isInteractive else { return nil }
    var text = text
    text.withUTF8 { bytes in _ = write(STDOUT_FILENO, bytes.baseAddress, bytes.count) }
    return nil
}

if Terminal.isInteractive { emit(menu) }
session: while true {
    _ = prompt("> ")
    guard let line = await input.next() else { break }
    var words = line.split(separator: " ").map(String.init)
    guard let command = words.first else { continue }
    if Terminal.isInteractive && command == "s" {
        _ = prompt("username: ")
        guard let username = await input.next() else { break }
        _ = prompt("[p]assword or email [c]ode? ")
        let method = await input.next() ?? "p"
        words = [method.hasPrefix("c") ? "signin-code" : "signin-password", username]
    }
    switch words[0] {
    case "signin-password" where words.count == 2:
        _ = prompt("password: ")
        Terminal.setEcho(false)
        let password = await input.next()
        Terminal.setEcho(true)
        if Terminal.isInteractive { emit("") }
        guard let password else { break session }
        await viewController.signIn(username: words[1], password: password)
    case "signin-code" where words.count == 2:
        await viewController.signIn(username: words[1]) {
            _ = prompt("code: ")
            return await input.next()
        }
    case "graph", "g": await viewController.callGraphAPI()
    case "device", "d": await viewController.getDeviceMode()
    case "signout", "o": await viewController.signOut()
    case "refresh", "r": await viewController.loadCurrentAccount()
    case "log", "l": for entry in await viewController.history() { emit("log: \(entry)") }
    case "quit", "q": break session
    default: emit("unknown command: \(line)" + (Terminal.isInteractive ? "\n" + menu : ""))
    }
}
emit("bye")
