import ExampleSupport
import Foundation
import GraphProfile
import SharedDeviceClient

// One of the demo's apps (Mail, Calendar or Notes: the same program, run with different
// arguments). It shows who is signed in and reacts to every account change. The orchestrator
// (multi-app-demo) drives it with commands on standard input and reads its lines:
//
//   stdin:  signin USERNAME (the password on the next line) | signout | graph | show | quit
//   stdout: ready showing=USER|nobody
//           sending sign-in|sign-out at=NS        (CLOCK_MONOTONIC ns, just before the call)
//           saw signed-in|signed-out|broker-restarted showing=USER|nobody at=NS
//           graph name=DISPLAY-NAME token=MS me=MS (a silent token of this app's own, then GET /v1.0/me)
//           showing=USER|nobody
//           error NAME: MESSAGE
//
// Usage: demo-app --name Mail --client-id mail-app [--address BUS]

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

guard let name = option("--name"), let clientId = option("--client-id") else {
    FileHandle.standardError.write(Data("usage: demo-app --name NAME --client-id ID [--address BUS]\n".utf8))
    exit(2)
}

func describe(_ account: Account?) -> String { account?.username ?? "nobody" }
func say(_ line: String) { emit(line) }

let app: PublicClientApplication
do {
    app = try PublicClientApplication(
        clientId: clientId, configuration: BrokerClientConfiguration(busAddress: option("--address")))
} catch {
    say("error \(error)")
    exit(1)
}

do {
    // Subscribe first, then read the state: no change can fall between the two.
    let changes = try await app.subscribeToAccountChanges()
    let watcher = Task {
        for try await change in changes {
            let at = Clock.monotonicNanoseconds()
            say("saw \(change.reason.rawValue) showing=\(describe(change.current)) at=\(at)")
        }
    }
    let (current, _) = try await app.currentAccount()
    say("ready showing=\(describe(current))")

    let input = LineInput()
    commands: while let line = await input.next() {
        let words = line.split(separator: " ").map(String.init)
        do {
            switch words.first {
            case "signin":
                guard words.count == 2, let password = await input.next() else {
                    say("error usage: signin USERNAME")
                    continue
                }
                say("sending sign-in at=\(Clock.monotonicNanoseconds())")
                let result = try await app.signIn(username: words[1], password: password, scopes: ["User.Read"])
                say("signed-in \(result.account.username)")
            case "signout":
                let shared = try await app.deviceInformation().deviceMode == .shared
                say("sending sign-out at=\(Clock.monotonicNanoseconds())")
                try await app.signOut(account: nil, parameters: SignoutParameters(signoutFromBrowser: shared))
                say("signed-out")
            case "graph":
                // The tutorial's "Call Graph": a silent token (this app's own, through single
                // sign-on when another app signed the user in), then the profile with it.
                let started = Clock.monotonicNanoseconds()
                let token = try await app.acquireTokenSilent(SilentTokenParameters(scopes: ["User.Read"]))
                let tokenTime = Clock.monotonicNanoseconds()
                guard let base = GraphProfile.baseURL(forAuthority: token.authority) else {
                    say("error Graph: no Graph-like endpoint beside \(token.authority)")
                    continue
                }
                do {
                    let profile = try await GraphProfile.me(
                        baseURL: base, authorizationHeader: token.authorizationHeader)
                    let meTime = Clock.monotonicNanoseconds()
                    say(
                        "graph name=\((profile.displayName ?? "?").replacingOccurrences(of: " ", with: "_")) "
                            + "token=\(Clock.milliseconds(started, tokenTime)) "
                            + "me=\(Clock.milliseconds(tokenTime, meTime))"
                    )
                } catch {
                    say("error Graph: \(error)")
                }
            case "show":
                say("showing=\(describe(try await app.currentAccount().current))")
            case "quit":
                break commands
            default:
                say("error unknown command: \(line)")
            }
        } catch {
            say("error \(error.errorName): \(error.message)")
        }
    }
    watcher.cancel()
} catch {
    say("error \(error)")
    exit(1)
}
