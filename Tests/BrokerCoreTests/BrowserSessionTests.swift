import BrokerCore
import Testing

/// The provider's browser session and the next person: in shared mode every interactive sign-in
/// asks the provider to authenticate the person now (`prompt=login`, `max_age=0`), and a
/// sign-out ends the browser session as the device's `browserSignOut` policy says.
@Suite struct BrowserSessionTests {
    @Test func sharedModeAsksForTheCredentialsEveryTime() async {
        let h = Harness()
        for prompt in [nil, Prompt.selectAccount, .consent] {
            _ = await failureCode {
                _ = try await h.broker.acquireTokenInteractive(
                    clientId: "mail", scopes: [], prompt: prompt, loginHint: nil, flowId: "", owner: ":1.1")
            }
        }
        #expect(h.provider.interactiveRequests.map(\.prompt) == [.login, .login, .login])
        #expect(h.provider.interactiveRequests.map(\.maxAge) == [0, 0, 0])
    }

    /// An app that asked for no interaction is told so at once: shared mode's sign-in is all
    /// interaction, so no page is opened to find that out.
    @Test func sharedModeRefusesPromptNoneWithoutOpeningAPage() async throws {
        let h = Harness()
        let code = await failureCode {
            _ = try await h.broker.acquireTokenInteractive(
                clientId: "mail", scopes: [], prompt: Prompt.none, loginHint: nil, flowId: "", owner: ":1.1")
        }
        #expect(code == .interactionRequired)
        #expect(h.provider.interactiveRequests.isEmpty)
        // Signed in, the same: a silent token is what the app asked for, and it has its own call.
        _ = try await h.signIn(client: "mail")
        let again = await failureCode {
            _ = try await h.broker.acquireTokenInteractive(
                clientId: "mail", scopes: [], prompt: Prompt.none, loginHint: nil, flowId: "", owner: ":1.1")
        }
        #expect(again == .interactionRequired)
        #expect(h.provider.interactiveRequests.isEmpty)
    }

    @Test func defaultModeLeavesThePromptToTheApp() async {
        let h = Harness(mode: .default)
        _ = await failureCode {
            _ = try await h.broker.acquireTokenInteractive(
                clientId: "mail", scopes: [], prompt: .selectAccount, loginHint: nil, flowId: "", owner: ":1.1")
        }
        #expect(h.provider.interactiveRequests.map(\.prompt) == [.selectAccount])
        #expect(h.provider.interactiveRequests.map(\.maxAge) == [nil])
    }

    @Test func sharedModeEndsTheBrowserSessionOnEverySignOutByDefault() async throws {
        let h = Harness()
        h.provider.endSession = .success(.done)
        _ = try await h.signIn(client: "mail")
        let outcome = try await h.broker.signOut(clientId: "calendar", accountId: "", fromBrowser: false)
        #expect(h.provider.endSessionCalls == 1)
        // The page was handed over; whether the provider ended its session is never known.
        #expect(outcome.browserLogoutOpened && !outcome.browserSessionEnded)
        #expect(outcome.notes.isEmpty, "\(outcome.notes)")
    }

    /// The next person must not inherit the browser session however the shift ended: after
    /// inactivity, at the screen lock or by the provider's word, nobody asked for the browser
    /// sign-out, and the default policy ends it all the same.
    @Test(arguments: [SignOutCause.idle, .lock, .reboot])
    func aShiftThatEndsWithoutAnAppEndsTheBrowserSessionToo(cause: SignOutCause) async throws {
        let h = Harness()
        h.provider.endSession = .success(.done)
        _ = try await h.signIn(client: "mail")
        let outcome = try await h.broker.endShift(cause: cause)
        #expect(h.provider.endSessionCalls == 1)
        #expect(outcome?.browserLogoutOpened == true && outcome?.browserSessionEnded == false)
        #expect(outcome?.cause == cause)
    }

    @Test func theProvidersSignOutEndsTheBrowserSessionToo() async throws {
        let h = Harness()
        h.provider.endSession = .success(.done)
        _ = try await h.signIn(client: "mail")
        _ = await h.broker.providerEnded(
            .sessionRevoked, for: EventSubject(emails: ["alice@contoso.example"]), at: h.clock.now() + 1)
        #expect(h.changes.changes.last?.cause == .provider)
        #expect(h.provider.endSessionCalls == 1)
    }

    @Test func whenAskedEndsItOnlyWhenTheAppAsks() async throws {
        let h = Harness(browserSignOut: .whenAsked)
        h.provider.endSession = .success(.done)
        _ = try await h.signIn(client: "mail")
        #expect(try await h.broker.signOut(clientId: "calendar", accountId: "").browserLogoutOpened == false)
        #expect(h.provider.endSessionCalls == 0)
        _ = try await h.signIn(client: "mail")
        #expect(try await h.broker.signOut(clientId: "calendar", accountId: "", fromBrowser: true).browserLogoutOpened)
        #expect(h.provider.endSessionCalls == 1)
    }

    @Test func neverKeepsItAndSaysSoWhenTheAppAsked() async throws {
        let h = Harness(browserSignOut: .never)
        h.provider.endSession = .success(.done)
        _ = try await h.signIn(client: "mail")
        let outcome = try await h.broker.signOut(clientId: "mail", accountId: "", fromBrowser: true)
        #expect(h.provider.endSessionCalls == 0)
        #expect(!outcome.browserLogoutOpened && !outcome.browserSessionEnded)
        #expect(outcome.notes.contains { $0.contains("browserSignOut is never") }, "\(outcome.notes)")
    }

    @Test func anEndSessionPageThatCannotBeOpenedLeavesTheSignOutStanding() async throws {
        let h = Harness()
        h.provider.endSession = .failure(
            BrokerFailure(.browserUnavailable, "no browser could be opened: xdg-open failed (exit status 3)"))
        _ = try await h.signIn(client: "mail")
        let outcome = try await h.broker.signOut(clientId: "mail", accountId: "")
        #expect(!outcome.browserLogoutOpened && !outcome.browserSessionEnded)
        #expect(outcome.notes.contains { $0.contains("browser session may still be open") }, "\(outcome.notes)")
        #expect(outcome.notes.contains { $0.contains("close any browser window") }, "\(outcome.notes)")
        #expect(!outcome.notes.contains { $0.contains("xdg-open") }, "\(outcome.notes)")
        #expect(h.broker.deviceAccount == nil)
        #expect(h.changes.changes.last?.current == nil)
    }

    @Test func theDefaultPolicyFollowsTheDeviceMode() {
        #expect(BrowserSignOutPolicy.defaultPolicy(for: .shared) == .always)
        #expect(BrowserSignOutPolicy.defaultPolicy(for: .default) == .whenAsked)
    }
}
