/// Hands a web page to the person's browser: the sign-in page of an interactive sign-in, the
/// provider's end-session page of a sign-out from the browser. What it is given is always a
/// one-time local start address of the loopback listener, never the provider's URL, whose query
/// holds the flow's `state` or an ID token: an opener may put it on a command line, which every
/// user of the machine can read.
///
/// The identity layer knows no D-Bus: brokerd gives ``OIDCProvider`` an opener that asks the
/// desktop portal first and falls back to ``BrowserCommand``.
public protocol URLOpener: Sendable {
    /// Returns once `url` is on its way to a browser. Throws `.browserUnavailable`, saying what
    /// was tried and why it failed, when nothing could take it; `.cancelled` when the person
    /// declined (dismissed the desktop's "open with" dialog).
    func open(_ url: String) async throws(IdentityError)
}
