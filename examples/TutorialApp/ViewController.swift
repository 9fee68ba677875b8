import ExampleSupport
import Foundation
import GraphProfile
import SharedDeviceClient

/// The tutorial's `ViewController`, ported: the same methods, in the same order, with the UI
/// replaced by lines on standard output (each also kept in the log). Lines are stable, so a
/// script can assert them:
///
///     current account: USER | none
///     account USER has been signed out
///     signed in: USER
///     code sent to MASKED (N characters, CHANNEL)
///     graph: displayName=NAME userPrincipalName=USER
///     device mode: shared | default
///     signed out
///     error: NAME: MESSAGE
actor ViewController {
    let kScopes = ["User.Read"]
    let applicationContext: PublicClientApplication
    let graphBase: String?
    private var currentAccount: Account?
    private var log: [String] = []

    init(applicationContext: PublicClientApplication, graphBase: String?) {
        self.applicationContext = applicationContext
        self.graphBase = graphBase
    }

    /// The tutorial's `updateLogging(text:)`: show it, and keep it.
    func updateLogging(text: String) {
        log.append(text)
        emit(text)
    }

    /// The tutorial's `loadCurrentAccount()`: called on start, when the app comes back to the
    /// foreground (SIGCONT here), and on `refresh`.
    func loadCurrentAccount() async {
        do {
            let (current, previous) = try await applicationContext.currentAccount()
            if let current {
                updateCurrentAccount(account: current)
                updateLogging(text: "current account: \(current.username)")
                return
            }
            if let previous {
                updateLogging(text: "account \(previous.username) has been signed out")
            } else {
                updateLogging(text: "current account: none")
            }
            updateCurrentAccount(account: nil)
        } catch {
            updateLogging(text: "error: \(error)")
        }
    }

    /// The tutorial's `getDeviceMode()`.
    func getDeviceMode() async {
        do {
            let deviceInformation = try await applicationContext.deviceInformation()
            let isSharedDevice = deviceInformation.deviceMode == .shared
            updateLogging(text: "device mode: \(isSharedDevice ? "shared" : "default")")
        } catch {
            updateLogging(text: "error: \(error)")
        }
    }

    /// Sign-in with a password (the broker's native password path).
    func signIn(username: String, password: String) async {
        do {
            let result = try await applicationContext.signIn(username: username, password: password, scopes: kScopes)
            updateCurrentAccount(account: result.account)
            updateLogging(text: "signed in: \(result.account.username)")
            // The broker's previous account is what this app last loaded: load it now, so a
            // sign-out elsewhere is reported as "has been signed out" on the next load.
            await loadCurrentAccount()
        } catch {
            updateLogging(text: "error: \(error)")
        }
    }

    /// Sign-in with a one-time code sent by email: `readCode` asks for it (and again after a wrong one).
    func signIn(username: String, readCode: @Sendable () async -> String?) async {
        do {
            let state = try await applicationContext.signIn(username: username, scopes: kScopes)
            updateLogging(text: "code sent to \(state.sentTo) (\(state.codeLength) characters, \(state.channel))")
            while true {
                guard let code = await readCode() else {
                    await state.cancel()
                    updateLogging(text: "sign-in cancelled")
                    return
                }
                do {
                    let result = try await state.submitCode(code)
                    updateCurrentAccount(account: result.account)
                    updateLogging(text: "signed in: \(result.account.username)")
                    await loadCurrentAccount()
                    return
                } catch BrokerError.invalidCode {
                    updateLogging(text: "wrong code, try again")
                } catch BrokerError.codeExpired {
                    try await state.resendCode()
                    updateLogging(text: "code expired; a new one was sent to \(state.sentTo)")
                }
            }
        } catch {
            updateLogging(text: "error: \(error)")
        }
    }

    /// The tutorial's `callGraphAPI`: load the current account; with nobody signed in, sign in
    /// interactively; otherwise a token silently (interactively when that needs the user); then Graph.
    func callGraphAPI() async {
        await loadCurrentAccount()
        let token: String?
        if currentAccount == nil {
            updateLogging(text: "nobody is signed in: signing in interactively")
            token = await acquireTokenInteractively()
        } else {
            token = await acquireTokenSilently()
        }
        guard let token else { return }
        await getContentWithToken(authorizationHeader: token)
    }

    /// The tutorial's `acquireTokenSilently(_:)`, falling back to `acquireTokenInteractively()`
    /// on interaction required.
    private func acquireTokenSilently() async -> String? {
        let parameters = SilentTokenParameters(scopes: kScopes, account: currentAccount)
        do {
            let result = try await applicationContext.acquireTokenSilent(parameters)
            updateLogging(text: "token acquired silently for \(result.account.username)")
            return result.authorizationHeader
        } catch  where error.isInteractionRequired {
            updateLogging(text: "interaction required: signing in interactively")
            return await acquireTokenInteractively()
        } catch {
            updateLogging(text: "error: \(error)")
            return nil
        }
    }

    /// The tutorial's `acquireTokenInteractively()`: the system browser, `.selectAccount`.
    private func acquireTokenInteractively() async -> String? {
        let parameters = InteractiveTokenParameters(scopes: kScopes, promptType: .selectAccount)
        do {
            let result = try await applicationContext.acquireToken(parameters)
            updateCurrentAccount(account: result.account)
            updateLogging(text: "token acquired interactively for \(result.account.username)")
            await loadCurrentAccount()
            return result.authorizationHeader
        } catch {
            updateLogging(text: "error: \(error)")
            return nil
        }
    }

    /// The tutorial's `getContentWithToken()`: `GET /v1.0/me` with the Authorization header.
    private func getContentWithToken(authorizationHeader: String) async {
        var base = graphBase
        if base == nil, let authority = try? await applicationContext.deviceInformation().authority {
            base = GraphProfile.baseURL(forAuthority: authority)
        }
        guard let base else {
            updateLogging(text: "error: no Graph URL (give --graph)")
            return
        }
        do {
            let profile = try await GraphProfile.me(baseURL: base, authorizationHeader: authorizationHeader)
            updateLogging(
                text:
                    "graph: displayName=\(profile.displayName ?? "") "
                    + "userPrincipalName=\(profile.userPrincipalName ?? "")"
            )
        } catch {
            updateLogging(text: "error: \(error)")
        }
    }

    /// The tutorial's `signOut(_:)`: `signoutFromBrowser` on a shared device.
    func signOut() async {
        do {
            let deviceInformation = try await applicationContext.deviceInformation()
            let parameters = SignoutParameters(signoutFromBrowser: deviceInformation.deviceMode == .shared)
            try await applicationContext.signOut(account: currentAccount, parameters: parameters)
            updateCurrentAccount(account: nil)
            updateLogging(text: "signed out")
        } catch {
            updateLogging(text: "error: \(error)")
        }
    }

    /// The tutorial's `updateCurrentAccount(account:)`.
    private func updateCurrentAccount(account: Account?) {
        currentAccount = account
    }

    /// Everything that happened, oldest first.
    func history() -> [String] { log }
}
