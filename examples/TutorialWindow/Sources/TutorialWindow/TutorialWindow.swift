import CGtk
import Foundation
import GraphProfile
import SharedDeviceClient

/// The tutorial's window: the device mode and the current account at the top, then either the
/// sign-in page (email and one-time code, password, browser) or the signed-in page ("Call
/// Microsoft Graph API", "Sign Out", "Get device info"), and the log, newest last. While the
/// broker warns of a sign-out after inactivity, the signed-in page starts with a countdown and
/// "Stay signed in"; after a sign-out nobody asked for, the sign-in page says why.
///
/// Its members are GTK's and touched on GTK's thread only (``GtkThread``): broker calls run in
/// Swift tasks and hand their results back through ``GtkThread/onMain(_:)``, so the window keeps
/// redrawing however slow the provider is.
final class TutorialWindow: @unchecked Sendable {
    let window: Widget
    private let broker: PublicClientApplication
    private let appName: String
    private let graphBase: String?
    private let scopes = ["User.Read"]

    private let toasts: Widget
    private let title: Widget
    private let modeLabel = Make.label("", accessibleName: tr("Device mode"))
    private let accountLabel = Make.label("", accessibleName: tr("Current account"))
    /// One page shows at a time; the others are hidden, so that assistive technologies see only it.
    private let pages = Make.box(vertical: true, spacing: 0)
    private var pageWidgets: [Page: Widget] = [:]
    private let statusPage: Widget
    private let emailEntry = Make.entry(placeholder: tr("Email"), accessibleName: tr("Email"))
    private let codeEntry = Make.entry(placeholder: tr("Code"), accessibleName: tr("Code"))
    private let codeError = Make.label("", accessibleName: tr("Code problem"))
    private let passwordEntry = Make.passwordEntry(accessibleName: tr("Password"))
    private let codeRow: Widget
    private let browserRow: Widget
    /// While the person approves on their phone: the code the phone shows too, and Cancel.
    private let phoneRow: Widget
    private let phoneLabel = Make.label("")
    /// Shown where the provider offers approval on a phone (`ciba` in the sign-in options).
    private var withPhone: Widget?
    private let spinner = gtk_spinner_new()!
    private let browserSwitch = gtk_switch_new()!
    private let profileLabel = Make.label("", accessibleName: tr("Profile"))
    private let logBuffer = gtk_text_buffer_new(nil)!
    private let logView: Widget
    private var signInButtons: [Widget] = []
    /// The sign-out warning at the top of the signed-in page: the countdown and "Stay signed in".
    private let warningBanner = tw_alert_box_new(12)!
    private let warningLabel = Make.label("")
    /// Why the device was signed out, when nobody here asked (inactivity, the screen lock, ...).
    private let signedOutNote = Make.label("")

    /// The account the window shows; nil: nobody.
    private var shown: Account?
    private var codeFlow: SignInCodeRequiredState?
    private var browserFlow: Task<Void, Never>?
    private var phoneFlow: PhoneApprovalSignIn?
    /// The pending sign-out's deadline (microseconds of the realtime clock) and its reason; nil:
    /// no warning.
    private var warning: (deadline: UInt64, reason: SignOutCause)?
    /// Wakes the countdown each time its number changes, while a warning is on.
    private var ticker: Task<Void, Never>?

    init(
        application: UnsafeMutablePointer<GtkApplication>, broker: PublicClientApplication, appName: String,
        graphBase: String?
    ) {
        self.broker = broker
        self.appName = appName
        self.graphBase = graphBase
        window = adw_application_window_new(application)!
        gtk_window_set_title(window.as(GtkWindow.self), appName)
        gtk_window_set_default_size(window.as(GtkWindow.self), 480, 640)

        title = adw_window_title_new(appName, "")!
        let header = adw_header_bar_new()!
        adw_header_bar_set_title_widget(header.opaque, title)

        statusPage = adw_status_page_new()!
        codeRow = Make.box(vertical: false)
        browserRow = Make.box(vertical: false)
        phoneRow = Make.box(vertical: false)
        logView = gtk_text_view_new_with_buffer(logBuffer)!
        toasts = adw_toast_overlay_new()!
        build(header: header)
        setPage(.loading)
    }

    // MARK: Building

    private func build(header: Widget) {
        // Someone else's flow: the status page while the broker is away, with Retry.
        adw_status_page_set_icon_name(statusPage.opaque, "network-offline-symbolic")
        let retry = Make.button(tr("Retry")) { [unowned self] in self.loadCurrentAccount() }
        gtk_widget_set_halign(retry, GTK_ALIGN_CENTER)
        adw_status_page_set_child(statusPage.opaque, retry)

        // The sign-in page.
        let sendCode = Make.button(tr("Send code")) { [unowned self] in self.sendCode() }
        let submitCode = Make.button(tr("Sign in with code")) { [unowned self] in self.submitCode() }
        let resend = Make.button(tr("Resend code")) { [unowned self] in self.resendCode() }
        for child in [codeEntry, submitCode, resend] { gtk_box_append(codeRow.as(GtkBox.self), child) }
        gtk_widget_set_hexpand(codeEntry, 1)
        codeRow.setVisible(false)
        codeError.setVisible(false)
        gtk_widget_add_css_class(codeError, "error")
        let withPassword = Make.button(tr("Sign in with password")) { [unowned self] in self.signInWithPassword() }
        let withBrowser = Make.button(tr("Sign in with browser")) { [unowned self] in self.signInWithBrowser() }
        let cancel = Make.button(tr("Cancel")) { [unowned self] in self.browserFlow?.cancel() }
        spinner.accessibleLabel(tr("Waiting for the browser"))
        for child in [spinner, Make.label(tr("Continue in your browser")), cancel] {
            gtk_box_append(browserRow.as(GtkBox.self), child)
        }
        browserRow.setVisible(false)
        let withPhone = Make.button(tr("Approve on my phone")) { [unowned self] in self.signInWithPhone() }
        withPhone.setVisible(false)
        self.withPhone = withPhone
        let cancelPhone = Make.button(tr("Cancel approval")) { [unowned self] in self.cancelPhoneApproval() }
        gtk_widget_set_hexpand(phoneLabel, 1)
        for child in [phoneLabel, cancelPhone] { gtk_box_append(phoneRow.as(GtkBox.self), child) }
        phoneRow.setVisible(false)
        signInButtons = [sendCode, submitCode, resend, withPassword, withBrowser, withPhone]
        signedOutNote.setVisible(false)
        gtk_widget_add_css_class(signedOutNote, "heading")
        let signIn = Make.box(
            vertical: true,
            [
                signedOutNote, Make.label(tr("Sign in with your work email: a code is sent there.")), emailEntry,
                sendCode, codeRow,
                codeError, passwordEntry, withPassword, withBrowser, browserRow, withPhone, phoneRow,
            ])

        // The signed-in page.
        let callGraph = Make.button(tr("Call Microsoft Graph API")) { [unowned self] in self.callGraph() }
        let signOut = Make.button(tr("Sign Out")) { [unowned self] in self.signOut() }
        browserSwitch.accessibleLabel(tr("Also sign out of the browser"))
        let switchRow = Make.box(vertical: false, [Make.label(tr("Also sign out of the browser")), browserSwitch])
        let deviceInfo = Make.button(tr("Get device info")) { [unowned self] in self.showDeviceInformation() }
        buildWarningBanner()
        let signedIn = Make.box(
            vertical: true, [warningBanner, callGraph, profileLabel, switchRow, signOut, deviceInfo])

        pageWidgets = [
            .unavailable: statusPage, .signIn: signIn, .signedIn: signedIn, .loading: Make.label(tr("Loading …")),
        ]
        for (_, page) in pageWidgets.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            gtk_box_append(pages.as(GtkBox.self), page)
        }

        // The log: read-only, newest last.
        gtk_text_view_set_editable(logView.as(GtkTextView.self), 0)
        gtk_text_view_set_cursor_visible(logView.as(GtkTextView.self), 0)
        gtk_text_view_set_wrap_mode(logView.as(GtkTextView.self), GTK_WRAP_WORD_CHAR)
        logView.accessibleLabel(tr("Log"))
        let scroller = gtk_scrolled_window_new()!
        gtk_scrolled_window_set_child(scroller.opaque, logView)
        gtk_widget_set_vexpand(scroller, 1)
        gtk_widget_set_size_request(scroller, -1, 160)

        let body = Make.box(vertical: true, spacing: 12, [modeLabel, accountLabel, pages, scroller])
        body.margins(12)
        adw_toast_overlay_set_child(toasts.opaque, body)
        let content = Make.box(vertical: true, spacing: 0, [header, toasts])
        adw_application_window_set_content(window.as(AdwApplicationWindow.self), content)

        // The tutorial's "the app comes to the foreground": the window becomes active.
        Signals.connect(window.raw, "notify::is-active", withArgument: true) { [unowned self] in
            if gtk_window_is_active(self.window.as(GtkWindow.self)) != 0 { self.loadCurrentAccount() }
        }
    }

    /// libadwaita 1.2 (Debian 12) has no AdwBanner: a card with the countdown and the button.
    private func buildWarningBanner() {
        let stay = Make.button(tr("Stay signed in")) { [unowned self] in
            // The broker offers apps no method to extend a session, on purpose: an app could then
            // keep the session of a person who walked away alive for the next one at the device.
            // Nor a back door: signals claiming to be the idle monitor or the notice's action
            // count only from the program that owns that name on the bus.
            // What keeps the person signed in is the person: this click is input, which the
            // desktop's idle source reports to brokerd, and brokerd withdraws the warning
            // (SignOutCancelled hides this banner). So the button only says so.
            self.toast(tr("Staying signed in"))
        }
        gtk_widget_add_css_class(stay, "suggested-action")
        gtk_widget_set_valign(stay, GTK_ALIGN_CENTER)
        gtk_widget_set_hexpand(warningLabel, 1)
        gtk_widget_add_css_class(warningLabel, "warning")
        gtk_widget_add_css_class(warningLabel, "heading")
        for child in [warningLabel, stay] { gtk_box_append(warningBanner.as(GtkBox.self), child) }
        gtk_widget_add_css_class(warningBanner, "card")
        for child in [warningLabel, stay] { child.margins(12) }
        warningBanner.accessibleLabel(tr("Sign-out warning"))
        warningBanner.setVisible(false)
    }

    // MARK: What the window shows

    private enum Page: String, Hashable {
        case loading, unavailable
        case signIn = "sign-in"
        case signedIn = "signed-in"
    }

    private func setPage(_ page: Page) {
        for (name, widget) in pageWidgets { widget.setVisible(name == page) }
    }

    private func show(account: Account?) {
        if shown != account { profileLabel.labelText = "" }
        shown = account
        if let account {
            accountLabel.labelText = String(format: tr("Signed in: %@"), account.description)
            // Why the last person was signed out is for the sign-in page only.
            signedOutNote.setVisible(false)
            setPage(.signedIn)
        } else {
            accountLabel.labelText = tr("Nobody is signed in")
            // Nobody left to sign out: a warning still shown would count down to nothing.
            endWarning()
            setPage(.signIn)
        }
    }

    /// The warning's banner, or its new deadline (a warning that started again).
    private func showWarning(deadline: UInt64, reason: SignOutCause) {
        let first = warning == nil
        warning = (deadline, reason)
        warningBanner.setVisible(true)
        showCountdown()
        if first { log(warningLabel.labelText) }
        ticker?.cancel()
        ticker = Task.detached { [weak self] in
            // Each wake-up lands just after the whole second the number changes on, counted from
            // the deadline, so the number never lags the broker's clock by most of a second.
            while let left = Self.microsecondsLeft(until: deadline), left > 0 {
                do { try await Task.sleep(for: .microseconds(left % 1_000_000 + 5_000)) } catch { return }
                GtkThread.onMain { [weak self] in self?.showCountdown() }
            }
        }
    }

    private func showCountdown() {
        guard let warning else { return }
        let left = Self.microsecondsLeft(until: warning.deadline) ?? 0
        // Whole seconds, rounded up: "1 s" until the deadline itself.
        let seconds = Int32(clamping: left / 1_000_000 + (left % 1_000_000 > 0 ? 1 : 0))
        let text =
            warning.reason == .idle
            ? tr("You will be signed out in %d s because of inactivity") : tr("You will be signed out in %d s")
        warningLabel.labelText = String(format: text, seconds)
    }

    /// Microseconds from now to `deadline` on the realtime clock (the broker's); nil when past.
    private static func microsecondsLeft(until deadline: UInt64) -> UInt64? {
        let now = UInt64(max(0, Date().timeIntervalSince1970 * 1_000_000))
        return deadline > now ? deadline - now : nil
    }

    /// Hides the banner; true when one was shown.
    @discardableResult
    private func endWarning() -> Bool {
        let wasShown = warning != nil
        warning = nil
        ticker?.cancel()
        ticker = nil
        warningBanner.setVisible(false)
        return wasShown
    }

    /// What the person is told about a sign-out nobody at this window asked for; nil for an app's
    /// `SignOut`, which the person (or another app) did on purpose.
    private static func words(for cause: SignOutCause) -> String? {
        switch cause {
        case .app: nil
        case .idle: tr("Signed out after inactivity")
        case .lock: tr("Signed out because the screen was locked")
        case .reboot: tr("Signed out because the device restarted")
        case .provider: tr("Signed out: the identity provider ended the session")
        }
    }

    private func showUnavailable(_ error: BrokerError) {
        adw_status_page_set_title(statusPage.opaque, tr("The broker is not answering"))
        adw_status_page_set_description(statusPage.opaque, error.message)
        accountLabel.labelText = ""
        setPage(.unavailable)
    }

    func log(_ line: String) {
        var end = GtkTextIter()
        gtk_text_buffer_get_end_iter(logBuffer, &end)
        let text = (gtk_text_buffer_get_char_count(logBuffer) > 0 ? "\n" : "") + line
        gtk_text_buffer_insert(logBuffer, &end, text, -1)
        gtk_text_buffer_get_end_iter(logBuffer, &end)
        let mark = gtk_text_buffer_create_mark(logBuffer, nil, &end, 0)
        gtk_text_view_scroll_to_mark(logView.as(GtkTextView.self), mark, 0, 0, 0, 1)
        gtk_text_buffer_delete_mark(logBuffer, mark)
    }

    func toast(_ text: String) {
        adw_toast_overlay_add_toast(toasts.opaque, adw_toast_new(text))
    }

    private func busy(_ busy: Bool) {
        for button in signInButtons { button.setSensitive(!busy) }
    }

    // MARK: Broker calls, off GTK's thread

    /// Runs `work` in a task of its own and `done` with its result on GTK's thread.
    private func run<Value: Sendable>(
        _ work: @escaping @Sendable () async throws(BrokerError) -> Value,
        _ done: @escaping (Result<Value, BrokerError>) -> Void
    ) {
        let finish = UncheckedSendable(done)
        Task.detached {
            let result: Result<Value, BrokerError>
            do throws(BrokerError) { result = .success(try await work()) } catch { result = .failure(error) }
            GtkThread.onMain { finish.value(result) }
        }
    }

    /// The device mode and the current account, and the previous one as the tutorial reports it.
    func loadCurrentAccount() {
        let broker = self.broker
        run({ () async throws(BrokerError) in
            // The sign-in options only decide which buttons show: without them, the rest still does.
            (
                try await broker.deviceInformation(), try await broker.currentAccount(),
                try? await broker.signInOptions()
            )
        }) { [unowned self] result in
            switch result {
            case .success(let (device, accounts, options)):
                self.withPhone?.setVisible(options?.flows.contains(.ciba) ?? false)
                let shared = device.deviceMode == .shared
                self.modeLabel.labelText = shared ? tr("Shared device") : tr("Personal device")
                adw_window_title_set_subtitle(self.title.opaque, self.modeLabel.labelText)
                if let previous = accounts.previous, previous != accounts.current {
                    self.log(String(format: tr("The account changed: %@ was signed in before"), previous.description))
                }
                self.show(account: accounts.current)
            case .failure(let error):
                self.log(error.message)
                self.showUnavailable(error)
            }
        }
    }

    /// Follows `AccountChanged` through the client library's stream, for as long as the window lives.
    func followAccountChanges() {
        let changes = broker.accountChanges
        Task.detached { [weak self] in
            do {
                for try await change in changes {
                    GtkThread.onMain { [weak self] in self?.accountChanged(change) }
                }
            } catch {}
        }
    }

    /// Follows the broker's sign-out warnings (``SignOutWarning``), for as long as the window lives.
    func followSignOutWarnings() {
        let broker = self.broker
        Task.detached { [weak self] in
            var backoff: Duration = .milliseconds(100)
            var again = false
            while !Task.isCancelled {
                do {
                    let warnings = try await broker.signOutWarnings()
                    backoff = .milliseconds(100)
                    if again {
                        // A cancellation may have been missed while the bus was away; the
                        // subscription starts with the warning in progress, if there is one.
                        GtkThread.onMain { [weak self] in self?.endWarning() }
                    }
                    again = true
                    for await warning in warnings {
                        GtkThread.onMain { [weak self] in self?.signOutWarning(warning) }
                    }
                } catch {}
                // No bus yet, or the connection was lost (the stream ended): again, later, never in
                // a tight loop.
                do { try await Task.sleep(for: backoff) } catch { return }
                backoff = min(backoff * 2, .seconds(5))
            }
        }
    }

    private func signOutWarning(_ warning: SignOutWarning) {
        switch warning {
        case .pending(let reason, let deadline):
            showWarning(deadline: deadline, reason: reason)
        case .cancelled:
            if endWarning() {
                toast(tr("You are still signed in"))
                log(tr("You are still signed in"))
            }
        }
    }

    private func accountChanged(_ change: AccountChange) {
        switch change.reason {
        case .signedOut:
            let why = change.cause.flatMap(Self.words(for:))
            if let previous = change.previous ?? shown {
                toast(why ?? String(format: tr("%@ was signed out"), previous.username))
                log(String(format: tr("%@ was signed out on this device"), previous.description))
            }
            if let why { log(why) }
            signedOutNote.labelText = why ?? ""
            signedOutNote.setVisible(why != nil)
        case .signedIn:
            if let current = change.current { log(String(format: tr("%@ signed in"), current.description)) }
        case .brokerRestarted:
            log(tr("The broker restarted"))
        }
        show(account: change.current)
    }

    private func sendCode() {
        let username = emailEntry.editableText.trimmingCharacters(in: .whitespaces)
        guard !username.isEmpty else { return showCodeError(tr("Type your email first")) }
        busy(true)
        let broker = self.broker
        let scopes = self.scopes
        run({ () async throws(BrokerError) in try await broker.signIn(username: username, scopes: scopes) }) {
            [unowned self] result in
            self.busy(false)
            switch result {
            case .success(let flow):
                self.codeFlow = flow
                gtk_entry_set_max_length(self.codeEntry.as(GtkEntry.self), Int32(flow.codeLength))
                self.codeRow.setVisible(true)
                self.showCodeError(nil)
                self.log(String(format: tr("A code was sent to %@"), flow.sentTo))
                gtk_widget_grab_focus(self.codeEntry)
            case .failure(let error):
                self.showCodeError(error.message)
            }
        }
    }

    private func submitCode() {
        guard let flow = codeFlow else { return }
        let code = codeEntry.editableText.trimmingCharacters(in: .whitespaces)
        busy(true)
        run({ () async throws(BrokerError) in try await flow.submitCode(code) }) { [unowned self] result in
            self.busy(false)
            switch result {
            case .success(let tokens):
                self.codeFlow = nil
                self.codeRow.setVisible(false)
                self.codeEntry.editableText = ""
                self.showCodeError(nil)
                self.log(String(format: tr("Signed in as %@"), tokens.account.description))
                self.show(account: tokens.account)
            case .failure(.invalidCode(let message)), .failure(.codeExpired(let message)):
                // The flow stays open: type the code again, or ask for a new one.
                self.showCodeError(message)
            case .failure(let error):
                self.codeFlow = nil
                self.codeRow.setVisible(false)
                self.showCodeError(error.message)
            }
        }
    }

    private func resendCode() {
        guard let flow = codeFlow else { return }
        run({ () async throws(BrokerError) in try await flow.resendCode() }) { [unowned self] result in
            switch result {
            case .success: self.log(String(format: tr("A new code was sent to %@"), flow.sentTo))
            case .failure(let error): self.showCodeError(error.message)
            }
        }
    }

    private func showCodeError(_ message: String?) {
        codeError.labelText = message ?? ""
        codeError.setVisible(message != nil)
        if let message { codeEntry.accessibleDescription(message) }
    }

    private func signInWithPassword() {
        let username = emailEntry.editableText.trimmingCharacters(in: .whitespaces)
        let password = passwordEntry.editableText
        guard !username.isEmpty, !password.isEmpty else { return showCodeError(tr("Type your email and password")) }
        busy(true)
        let broker = self.broker
        let scopes = self.scopes
        run({ () async throws(BrokerError) in
            try await broker.signIn(username: username, password: password, scopes: scopes)
        }) { [unowned self] result in
            self.busy(false)
            self.passwordEntry.editableText = ""
            switch result {
            case .success(let tokens):
                self.log(String(format: tr("Signed in as %@"), tokens.account.description))
                self.show(account: tokens.account)
            case .failure(let error):
                self.showCodeError(error.message)
            }
        }
    }

    private func signInWithBrowser() {
        busy(true)
        browserRow.setVisible(true)
        gtk_spinner_start(spinner.opaque)
        let broker = self.broker
        let scopes = self.scopes
        let hint = emailEntry.editableText.trimmingCharacters(in: .whitespaces)
        let log = UncheckedSendable { [unowned self] (line: String) in self.log(line) }
        browserFlow = Task.detached { [weak self] in
            let result: Result<TokenResult, BrokerError>
            do {
                result = .success(
                    try await broker.acquireToken(
                        InteractiveTokenParameters(
                            scopes: scopes, promptType: .selectAccount, loginHint: hint.isEmpty ? nil : hint,
                            progress: { progress in
                                guard let url = progress.url else { return }
                                GtkThread.onMain { log.value(String(format: tr("Continue in your browser: %@"), url)) }
                            })))
            } catch let error as BrokerError {
                result = .failure(error)
            } catch {
                result = .failure(.cancelled("\(error)"))
            }
            GtkThread.onMain { [weak self] in self?.browserFinished(result) }
        }
    }

    /// Approval on a phone (OpenID Connect CIBA): the provider asks the person named on their
    /// phone; the window shows the code the phone shows too, and waits.
    private func signInWithPhone() {
        let username = emailEntry.editableText.trimmingCharacters(in: .whitespaces)
        guard !username.isEmpty else { return showCodeError(tr("Type your email")) }
        showCodeError(nil)
        busy(true)
        let broker = self.broker
        let scopes = self.scopes
        run({ () async throws(BrokerError) in
            try await broker.signInWithPhoneApproval(username: username, scopes: scopes)
        }) { [unowned self] started in
            switch started {
            case .success(let flow):
                self.phoneFlow = flow
                self.phoneLabel.labelText = String(
                    format: tr("Approve the sign-in on your phone if it shows %@"), flow.bindingMessage)
                self.phoneRow.setVisible(true)
                self.run({ () async throws(BrokerError) in try await flow.result() }) { [unowned self] result in
                    self.phoneFinished(flow, result)
                }
            case .failure(let error):
                self.busy(false)
                self.showCodeError(error.message)
            }
        }
    }

    private func cancelPhoneApproval() {
        guard let flow = phoneFlow else { return }
        run({ () async throws(BrokerError) in try await flow.cancel() }) { _ in }
    }

    private func phoneFinished(_ flow: PhoneApprovalSignIn, _ result: Result<TokenResult, BrokerError>) {
        // A flow cancelled and replaced meanwhile is not this one's to end.
        guard phoneFlow === flow else { return }
        phoneFlow = nil
        busy(false)
        phoneRow.setVisible(false)
        switch result {
        case .success(let tokens):
            log(String(format: tr("Signed in as %@"), tokens.account.description))
            show(account: tokens.account)
        case .failure(let error) where error.code == .cancelled || error.code == .flowNotFound:
            break
        case .failure(let error):
            showCodeError(error.message)
        }
    }

    private func browserFinished(_ result: Result<TokenResult, BrokerError>) {
        browserFlow = nil
        busy(false)
        browserRow.setVisible(false)
        gtk_spinner_stop(spinner.opaque)
        switch result {
        case .success(let tokens):
            log(String(format: tr("Signed in as %@"), tokens.account.description))
            show(account: tokens.account)
        case .failure(let error):
            showCodeError(error.message)
        }
    }

    func callGraph() {
        let broker = self.broker
        let scopes = self.scopes
        let base = graphBase
        log(tr("Calling Microsoft Graph API …"))
        run({ () async throws(BrokerError) in
            let token = try await broker.acquireTokenSilent(SilentTokenParameters(scopes: scopes))
            let graph = base ?? GraphProfile.baseURL(forAuthority: token.authority) ?? ""
            do throws(GraphProfileError) {
                return try await GraphProfile.me(baseURL: graph, authorizationHeader: token.authorizationHeader)
            } catch {
                throw BrokerError.dbus(name: "GraphProfile", message: error.description)
            }
        }) { [unowned self] result in
            switch result {
            case .success(let profile):
                let text = String(
                    format: tr("Name: %@\nEmail: %@\nUser principal name: %@"), profile.displayName ?? "-",
                    profile.mail ?? "-", profile.userPrincipalName ?? "-")
                self.profileLabel.labelText = text
                self.log(tr("Microsoft Graph API answered"))
            case .failure(let error):
                self.log(error.message)
            }
        }
    }

    func signOut() {
        let broker = self.broker
        let fromBrowser = gtk_switch_get_active(browserSwitch.opaque) != 0
        let account = shown
        run({ () async throws(BrokerError) in
            try await broker.signOut(account: account, parameters: SignoutParameters(signoutFromBrowser: fromBrowser))
        }) { [unowned self] result in
            switch result {
            case .success(let outcome):
                self.log(tr("Signed out"))
                for note in outcome.notes { self.log(note) }
            case .failure(let error):
                self.log(error.message)
            }
        }
    }

    private func showDeviceInformation() {
        let broker = self.broker
        run({ () async throws(BrokerError) in try await broker.deviceInformation() }) { [unowned self] result in
            switch result {
            case .success(let device):
                self.log(
                    String(
                        format: tr("Device mode: %@, broker %@, device %@"), device.deviceMode.rawValue,
                        device.brokerVersion, device.deviceId))
            case .failure(let error):
                self.log(error.message)
            }
        }
    }
}

/// A value carried across to GTK's thread, where alone it is used.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
