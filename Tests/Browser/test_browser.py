#!/usr/bin/python3
"""Sign-in and sign-out on a shared kiosk, in a real Chromium, through the real desktop portal.

One Chromium, driven by Selenium (chromedriver), runs for the whole suite under Xvfb with a fixed
profile, as a kiosk's browser does: it keeps the provider's session cookie from one person to the
next. brokerd (shared mode) opens every page through org.freedesktop.portal.OpenURI on a private
session bus, served by the real xdg-desktop-portal (with xdg-desktop-portal-gtk and
xdg-permission-store, started by that bus); the portal launches the default handler of
x-scheme-handler/https, a .desktop file in a private XDG_DATA_DIRS named by a private
XDG_CONFIG_HOME/mimeapps.list, whose `Exec=chromium --user-data-dir=PROFILE %U` hands the page to
the running, Selenium-driven Chromium through Chromium's process singleton, as a new tab. Selenium
then reads and fills idp-sim's pages there as a person would. brokerctl acts as the apps; it is
built on the SharedDeviceClient library, so its sign-ins and sign-outs are the library's; the
tutorial app (examples/TutorialApp) signs in and out once too, as a Swift app of that library.

Scenarios: a PKCE sign-in (1, 1b); two people at one kiosk, for each way the device gets signed out
(2: an app without the browser sign-out under browserSignOut "when-asked", an app with it, and the
shared-mode default "always", which opens the provider's end-session page); a provider that
ignores prompt=login and max_age (3); the device-code flow approved on a second, headless Chromium,
"the phone" (4); login_hint (5); a person who closes the tab (6); and that every page went through
the portal (7). Screenshots of each idp-sim page, and the logs, are kept in --artifacts.

Usage: test_browser.py --broker-bin DIR [--artifacts DIR]
  DIR of brokerd, brokerctl, idp-sim and tutorial-app. Needs chromium, chromium-driver, python3-selenium,
  xdg-desktop-portal, xdg-desktop-portal-gtk and xvfb (`make browser-deps`).
Prints one line per check (ok / not ok) and `N passed, M failed`; exit status 0 when every check passed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (Broker, BusMonitor, Browser, Brokerctl, Failure, PrivateDesktop, Provider, Run,  # noqa: E402
                     install_tripwire, wait_until)

ALICE = ("alice@contoso.example", "alice-Passw0rd!")
BOB = ("bob@contoso.example", "bob-Passw0rd!")
USERS = {
    "users": [
        {"username": ALICE[0], "password": ALICE[1], "displayName": "Alice Example", "email": ALICE[0]},
        {"username": BOB[0], "password": BOB[1], "displayName": "Bob Example", "email": BOB[0]},
    ],
    "clients": [{"clientId": c, "family": "1"} for c in ("mail-app", "calendar-app", "notes-app")],
}
# idp-sim's directory when the users file names none.
TENANT_PATH = "/4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20/v2.0"
# The provider that ignores prompt=login and max_age lives under another path, so that its session
# cookie (same host, same name) never replaces the well-behaved provider's in the kiosk's browser.
IGNORING_PATH = "/ignoring-provider/v2.0"
SESSION_COOKIE = "idpsim_session"
INTERACTIVE_DEADLINE = 6  # seconds, for the person who closes the tab


class SignOutCause:
    """One way the device gets signed out while the kiosk's browser stays open.

    `sign_out(suite)` signs the device out; `broker_config` is the brokerd configuration it needs
    (None: the default); `ends_browser_session` says whether the provider's browser session must
    be gone afterwards (brokerd opened the end-session page). A cause is added by appending one to
    SIGN_OUT_CAUSES."""

    def __init__(self, key, title, sign_out, broker_config, ends_browser_session):
        self.key = key
        self.title = title
        self.sign_out = sign_out
        self.broker_config = broker_config
        self.ends_browser_session = ends_browser_session


def app_sign_out(client_id, from_browser):
    """An app signs the device out, asking for the browser sign-out or not."""

    def sign_out(suite):
        arguments = ["sign-out", "--client-id", client_id] + (["--from-browser"] if from_browser else [])
        result = suite.ctl.call(arguments)
        suite.run.check(result.returncode == 0, "%s signs the device out (%s)" % (
            client_id, "--from-browser" if from_browser else "no --from-browser"), result.stderr.strip())

    return sign_out


def reboot_sign_out(suite):
    """The device restarts: a new boot id, and brokerd, started again with signOutAfterReboot, ends
    the earlier boot's sign-in before it serves anyone (the browser, a kiosk's, stays open)."""
    with open(suite.run.env["BROKERD_BOOT_ID_FILE"], "w") as boot:
        boot.write("%032x\n" % time.monotonic_ns())
    suite.broker.stop()
    suite.broker = None
    suite.use_broker({"signOutAfterReboot": True})


def provider_sign_out(suite):
    """The organisation ends alice's session at the provider (idp-sim's operator route, as an Entra
    administrator's "revoke sessions"); brokerd's session check hears it within its interval and
    signs the device out with cause `provider`. No app asked for anything."""
    request = urllib.request.Request(
        suite.provider.base + "/test/revoke-sessions?" + urllib.parse.urlencode({"username": ALICE[0]}), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
    suite.run.check(bool(wait_quietly(lambda: suite.ctl.current("notes-app") is None, 15)),
                    "the provider's revocation signs the device out (sessionCheckSeconds 1)")


# An "idle" cause (sign-out after inactivity) needs the desktop's idle monitor, which this suite's
# kiosk has not: the core's BrowserSessionTests hold that every cause ends the browser session.
SIGN_OUT_CAUSES = [
    SignOutCause("c", "shared mode's default browserSignOut (always): an app's plain sign-out",
                 app_sign_out("calendar-app", False), None, True),
    SignOutCause("a", "an app's sign-out without the browser sign-out (browserSignOut when-asked)",
                 app_sign_out("calendar-app", False), {"browserSignOut": "when-asked"}, False),
    SignOutCause("b", "an app's sign-out with the browser sign-out (--from-browser)",
                 app_sign_out("calendar-app", True), {"browserSignOut": "when-asked"}, True),
    SignOutCause("r", "a restart of the device (signOutAfterReboot), the default browserSignOut",
                 reboot_sign_out, {"signOutAfterReboot": True}, True),
    SignOutCause("p", "the provider ending the session (sessionCheckSeconds), the default browserSignOut",
                 provider_sign_out, {"sessionCheckSeconds": 1}, True),
]


class Flow:
    """A browser sign-in in progress: brokerctl's process, the tab, the address brokerd opened."""

    def __init__(self, process, tab, url, start=None):
        self.process = process
        self.tab = tab
        self.url = url
        self.query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query) if url else {}
        # The one-time local address brokerd handed the portal; its listener is the redirect's.
        self.start = start
        self.redirect = ("http://127.0.0.1:%d/" % urllib.parse.urlparse(start).port if start
                         else self.query.get("redirect_uri", ["?"])[0])
        # Once the page was there: the sign-in had begun.
        self.shown = time.time()


class Suite:
    def __init__(self, run):
        self.run = run
        self.check = run.check
        self.ctl = Brokerctl(run)
        self.brokers = []
        self.broker = None
        self.phone = None
        self.shots = 0

    # Setup

    def setup(self):
        run = self.run
        self.desktop = PrivateDesktop(run)
        self.profile = run.path("profiles", "kiosk")
        self.desktop.start(self.profile)
        self.tripwire = install_tripwire(run)
        self.monitor = BusMonitor(run, self.desktop.address)
        version = self.desktop.start_portal()
        self.check(version >= 3, "the real xdg-desktop-portal serves org.freedesktop.portal.OpenURI (version %d) on "
                   "the private bus" % version)
        self.kiosk = Browser(run, "kiosk", self.profile)
        run.note("Chromium %s (chromedriver %s), xdg-desktop-portal %s" % (
            self.kiosk.version, self.kiosk.driver.capabilities.get("chrome", {}).get("chromedriverVersion", "?")
            .split(" ")[0], package_version("xdg-desktop-portal")))
        users = run.path("users.json")
        with open(users, "w") as out:
            json.dump(USERS, out)
        self.users = users
        self.provider = Provider(run, "idp-sim", users, ["--device-code-interval", "1"]).use_authority(TENANT_PATH)
        self.state = run.path("state")
        self.use_broker(None)

    def use_broker(self, config, timeout=None, provider=None, state=None):
        """brokerd with this configuration (restarted when it differs); the browser stays open."""
        provider = provider or self.provider
        state = state or self.state
        wanted = (json.dumps(config, sort_keys=True), timeout, provider.authority, state)
        if self.broker is not None and self.broker.key == wanted:
            return self.broker
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
        self.broker = Broker(self.run, self.desktop, provider, state, config=config, timeout=timeout,
                             label="brokerd-%d" % (len(self.brokers) + 1))
        self.broker.key = wanted
        self.brokers.append(self.broker)
        return self.broker

    # Evidence

    def page_evidence(self, browser, name, origin):
        """A screenshot of the page in front, and its console checked for errors from `origin`."""
        self.shots += 1
        path = browser.screenshot("%02d-%s" % (self.shots, name))
        self.check(path is not None and os.path.getsize(path) > 1000, "screenshot %s saved" % os.path.basename(
            path or name))
        severe = browser.severe_from(origin)
        self.check(not severe, "no SEVERE console entry from idp-sim on the %s" % name.replace("-", " "),
                   "; ".join(entry.get("message", "") for entry in severe))

    def session_cookies(self, provider=None):
        provider = provider or self.provider
        path = urllib.parse.urlparse(provider.authority).path
        return [c for c in self.kiosk.cookies()
                if c.get("name") == SESSION_COOKIE and c.get("path", "").startswith(path) and c.get("value")]

    def opened_by_broker(self, prefix, since):
        """Addresses the current brokerd handed to the portal's OpenURI, starting with `prefix`,
        among the calls after the first `since`."""
        calls = self.monitor.open_uri_calls()[since:]
        return [url for sender, url, _ in calls if sender == self.broker.unique_name and url
                and url.startswith(prefix)]

    def started_by_broker(self, since):
        """The one-time start addresses (http://127.0.0.1:PORT/start/ID) the current brokerd handed
        to OpenURI after the first `since` calls: brokerd gives the browser nothing else."""
        return [url for url in self.opened_by_broker("http://127.0.0.1:", since) if "/start/" in url]

    def authorization_request(self, start):
        """The authorization request the browser made after following `start` (idp-sim's record of
        it, as a URL): the one whose redirect_uri is the listener behind `start`; None until then."""
        redirect = "http://127.0.0.1:%d/" % urllib.parse.urlparse(start).port
        for target in reversed(self.provider.browser_requests()):
            url = self.provider.base + target
            if url.startswith(self.provider.authorize) and \
                    urllib.parse.parse_qs(urllib.parse.urlparse(url).query).get("redirect_uri") == [redirect]:
                return url
        return None

    # Flows

    def begin_sign_in(self, client_id, label, hint=None):
        """Starts `brokerctl sign-in --interactive` and waits for its page as a new tab of the kiosk's Chromium."""
        known = self.kiosk.handles()
        self.kiosk.drain_console()
        since = len(self.monitor.open_uri_calls())
        arguments = ["sign-in", "--client-id", client_id, "--interactive"] + (["--username", hint] if hint else [])
        process = self.ctl.start(arguments, label)
        # The sign-in page, or (a provider that skips it) already the loopback redirect.
        tab = self.kiosk.wait_for_tab(known, "http://127.0.0.1:", 30, "the sign-in page of %s as a new tab" % label)
        starts = wait_until(lambda: self.started_by_broker(since), 10, "the OpenURI call of %s on the bus" % label)
        # The first page brokerd opened since: a refused sign-in's end-session page may follow at once.
        url = wait_until(lambda: self.authorization_request(starts[0]), 15,
                         "the authorization request of %s at the provider" % label)
        return Flow(process, tab, url, starts[0])

    def wait_for_login_form(self, flow, timeout=15):
        """Whether the flow's tab shows the sign-in form (rather than having been sent on at once)."""
        self.kiosk.switch(flow.tab)
        try:
            wait_until(lambda: self.kiosk.login_form() or not self.kiosk.url().startswith(self.provider.base),
                       timeout, "the sign-in page to load")
        except Failure:
            return False
        return self.kiosk.login_form()

    def submit(self, flow, person, label):
        """Types the person's credentials into the flow's tab; returns brokerctl's (status, out, err)."""
        self.kiosk.switch(flow.tab)
        self.type_credentials(flow, person)
        status, out, err = self.ctl.finish(flow.process, 45)
        redirect = flow.redirect
        landed = wait_until(lambda: self.kiosk.url().startswith(redirect) and self.kiosk.loaded()
                            and self.kiosk.text(), 15, "the loopback redirect in the tab")
        self.check(bool(landed) and "return to the app" in self.kiosk.text().lower(),
                   "%s: the browser's redirect reached brokerd's loopback listener (%s)" % (label, redirect),
                   self.kiosk.text())
        return status, out, err

    def type_credentials(self, flow, person):
        """A person takes seconds to type a password, and brokerd refuses an authentication it cannot
        tell from one made before the sign-in began (auth_time is whole seconds): the form is submitted
        from the whole second that follows 1.5 s after the page was there, never sooner."""
        due = int(flow.shown + 1.5) + 1
        if time.time() < due:
            time.sleep(due - time.time())
        self.kiosk.fill([("username", person[0]), ("password", person[1])])

    def browser_sign_in(self, client_id, person, label):
        """A whole browser sign-in of `person` through `client_id`, with its checks."""
        flow = self.begin_sign_in(client_id, label)
        self.check(self.wait_for_login_form(flow), "%s: the provider shows its sign-in form in the kiosk's browser"
                   % label, self.kiosk.url())
        self.page_evidence(self.kiosk, "sign-in-page-" + label, self.provider.origin)
        status, out, err = self.submit(flow, person, label)
        self.check(status == 0 and person[0] in out, "%s: brokerctl sign-in --interactive exits 0, signed in as %s"
                   % (label, person[0]), "status %s, %s %s" % (status, out.strip(), err.strip()))
        self.kiosk.close_tabs()
        return flow

    def sign_out_everything(self, client_id="notes-app"):
        """Puts the device back to nobody signed in and no browser session, between scenarios
        (`--from-browser`, so that every policy but "never" opens the end-session page)."""
        if self.ctl.current(client_id) is None and not self.session_cookies():
            return
        known = self.kiosk.handles()
        since = len(self.monitor.open_uri_calls())
        result = self.ctl.call(["sign-out", "--client-id", client_id, "--from-browser"])
        if result.returncode != 0:
            raise Failure("brokerctl sign-out failed: %s" % result.stderr.strip())
        if self.provider.logout and self.started_by_broker(since):
            self.kiosk.wait_for_tab(known, self.provider.logout, 20, "the end-session page")
            wait_until(lambda: not self.session_cookies(), 10, "the browser session to end")
        self.kiosk.close_tabs()

    def ensure_signed_in(self, client_id, person, label):
        if self.ctl.current(client_id) == person[0]:
            return
        self.sign_out_everything()
        self.browser_sign_in(client_id, person, label)

    # Scenarios

    def scenario_pkce_sign_in(self):
        """1. A PKCE sign-in as mail-app: brokerd -> portal -> a tab of the kiosk's Chromium."""
        run = self.run
        run.note("scenario 1: PKCE sign-in through the portal into the running Chromium (brokerctl, i.e. the "
                 "SharedDeviceClient library)")
        before = self.kiosk.handles()
        flow = self.begin_sign_in("mail-app", "alice-mail")
        self.check(flow.tab not in before and len(self.kiosk.handles()) == len(before) + 1,
                   "the sign-in page arrived as a new tab of the one Selenium-driven Chromium")
        self.check(not any(secret in flow.start for secret in ("state=", "code_challenge", "nonce=")),
                   "brokerd asked the portal to open a one-time local start address, with neither state nor PKCE "
                   "challenge in it", flow.start)
        self.check(flow.url.startswith(self.provider.authorize) and flow.query.get("code_challenge_method") == ["S256"]
                   and flow.query.get("client_id") == ["mail-app"],
                   "Chromium followed it to idp-sim's authorization endpoint, with PKCE (S256)", flow.url)
        self.check(wait_quietly(lambda: len(chromium_browsers(self.profile)) == 1, 15),
                   "one Chromium browser process runs with the kiosk's profile (the launched one handed the page over "
                   "and exited)", chromium_browsers(self.profile))
        self.check(self.wait_for_login_form(flow), "the kiosk's Chromium shows idp-sim's sign-in form",
                   self.kiosk.url())
        self.check(self.kiosk.url() == flow.url, "the tab's address is the authorization request the start address "
                   "sent it to", self.kiosk.url())
        self.page_evidence(self.kiosk, "sign-in-page", self.provider.origin)
        status, out, err = self.submit(flow, ALICE, "alice-mail")
        self.check(status == 0 and ALICE[0] in out, "brokerctl sign-in --interactive (mail-app) exits 0, signed in "
                   "as alice", "status %s, %s %s" % (status, out.strip(), err.strip()))
        self.check("Continue in your browser" in err, "brokerctl was told the page was opened (progress "
                   "browser-opened)", err.strip())
        self.check(self.ctl.current("mail-app") == ALICE[0], "brokerctl current-account (mail-app) shows alice")
        self.check(self.ctl.current("calendar-app") == ALICE[0], "calendar-app sees alice too (shared mode)")
        self.check(bool(self.session_cookies()), "Chromium now holds idp-sim's session cookie (the browser session "
                   "the next person must not inherit)")
        self.kiosk.close_tabs()

    def scenario_tutorial_app(self):
        """1b. The same through an app of the client library's own: examples/TutorialApp, whose
        `graph` signs in in the system browser when nobody is signed in, and whose `signout` asks
        for the browser sign-out on a shared device (as the iOS tutorial it ports does)."""
        run = self.run
        run.note("scenario 1b: the tutorial app (examples/TutorialApp, SharedDeviceClient) signs in in the browser")
        self.sign_out_everything()
        self.use_broker(None)
        binary = os.path.join(run.args.broker_bin, "tutorial-app")
        if not os.path.exists(binary):
            self.check(False, "tutorial-app is built", binary)
            return
        known = self.kiosk.handles()
        since = len(self.monitor.open_uri_calls())
        # On start it shows the current account, or who was signed out since mail-app last looked.
        app, line = run.start("tutorial-app", [binary, "--client-id", "mail-app"],
                              ready=("current account:", "account "), stdin=True)
        self.check(line == "current account: none" or line.endswith("has been signed out"),
                   "tutorial-app starts with nobody signed in", line)
        app.stdin.write("graph\n")
        app.stdin.flush()
        tab = self.kiosk.wait_for_tab(known, self.provider.authorize, 30, "the tutorial app's sign-in page")
        starts = wait_until(lambda: self.started_by_broker(since), 10, "its OpenURI call")
        flow = Flow(app, tab, self.kiosk.url(), starts[-1])
        self.check(self.wait_for_login_form(flow), "tutorial-app: its sign-in page is a tab of the kiosk's Chromium "
                   "with the sign-in form", self.kiosk.url())
        self.page_evidence(self.kiosk, "sign-in-page-tutorial-app", self.provider.origin)
        self.type_credentials(flow, ALICE)
        line = app.lines.wait_for(("token acquired interactively", "error:"), 30, "tutorial-app's token")
        self.check(line == "token acquired interactively for " + ALICE[0],
                   "tutorial-app: acquireToken (interactive) returns alice's token", line)
        line = app.lines.wait_for(("graph:", "error:"), 30, "tutorial-app's Graph call")
        self.check("userPrincipalName=" + ALICE[0] in line, "tutorial-app: Graph's /v1.0/me answers with alice", line)
        self.kiosk.close_tabs()
        known = self.kiosk.handles()
        app.stdin.write("signout\n")
        app.stdin.flush()
        line = app.lines.wait_for(("signed out", "error:"), 30, "tutorial-app's sign-out")
        self.check(line == "signed out", "tutorial-app: signOut (signoutFromBrowser on a shared device)", line)
        tab = wait_quietly(lambda: self.kiosk.wait_for_tab(known, self.provider.logout, 20, "the end-session tab"), 25)
        self.check(tab is not None and wait_quietly(lambda: not self.session_cookies(), 10),
                   "tutorial-app: its sign-out opened the end-session page in the kiosk's Chromium; the session ended")
        app.stdin.write("quit\n")
        app.stdin.flush()
        app.wait(timeout=15)
        run.stop(app)
        self.kiosk.close_tabs()

    def scenario_two_people(self, cause):
        """2. Alice signed in, the device signed out by `cause`, Bob at the same browser."""
        run = self.run
        label = "2%s" % cause.key
        run.note("scenario %s: two people at one kiosk; the device signed out by %s" % (label, cause.title))
        self.use_broker(cause.broker_config)
        self.ensure_signed_in("mail-app", ALICE, "alice-" + label)
        self.check(self.ctl.current("mail-app") == ALICE[0] and bool(self.session_cookies()),
                   "%s: alice is signed in and Chromium holds her browser session" % label)
        known = self.kiosk.handles()
        since = len(self.monitor.open_uri_calls())
        self.kiosk.drain_console()
        cause.sign_out(self)
        self.check(self.ctl.current("notes-app") is None, "%s: nobody is signed in on the device" % label)
        logout_pages = self.started_by_broker(since) if self.provider.logout else []
        if cause.ends_browser_session:
            self.check(bool(logout_pages) or bool(wait_quietly(lambda: self.started_by_broker(since), 10)),
                       "%s: brokerd asked the portal to open idp-sim's end-session page (through a one-time start "
                       "address)" % label)
            tab = wait_quietly(lambda: self.kiosk.wait_for_tab(known, self.provider.logout, 20, "the end-session tab"),
                               25)
            self.check(tab is not None, "%s: the end-session page (idp-sim's logout endpoint) loaded in the kiosk's "
                       "Chromium" % label, self.provider.logout)
            if tab is not None:
                wait_until(lambda: self.kiosk.loaded() and "signed out" in self.kiosk.text().lower(), 15,
                           "the end-session page's text")
                self.page_evidence(self.kiosk, "end-session-page-" + label, self.provider.origin)
            self.check(wait_quietly(lambda: not self.session_cookies(), 10),
                       "%s: idp-sim's session cookie is gone from Chromium" % label)
            self.kiosk.new_tab(self.provider.probe_url())
            self.check(wait_quietly(self.kiosk.login_form, 10),
                       "%s: a direct visit to the authorization endpoint (no prompt) shows the sign-in form: the "
                       "browser session ended" % label, self.kiosk.url())
        else:
            self.check(not logout_pages, "%s: no end-session page was opened" % label, logout_pages)
            self.check(bool(self.session_cookies()),
                       "%s: Chromium still holds alice's session at idp-sim (the attack's premise)" % label)
        self.kiosk.close_tabs()

        flow = self.begin_sign_in("notes-app", "bob-" + label)
        self.check(flow.query.get("prompt") == ["login"] and flow.query.get("max_age") == ["0"],
                   "%s: the authorization request brokerd opened carries prompt=login and max_age=0" % label, flow.url)
        shown = self.wait_for_login_form(flow)
        self.check(shown, "%s: bob's tab shows the sign-in form, not an immediate redirect as alice" % label,
                   self.kiosk.url())
        if shown:
            self.page_evidence(self.kiosk, "sign-in-page-bob-" + label, self.provider.origin)
            status, out, err = self.submit(flow, BOB, "bob-" + label)
        else:
            status, out, err = self.ctl.finish(flow.process, 30)
        self.check(status == 0 and BOB[0] in out and ALICE[0] not in out,
                   "%s: bob's brokerctl sign-in exits 0, signed in as bob" % label,
                   "status %s, %s %s" % (status, out.strip(), err.strip()))
        accounts = {client: self.ctl.current(client) for client in ("notes-app", "mail-app", "calendar-app")}
        self.check(set(accounts.values()) == {BOB[0]}, "%s: current-account shows bob in every app, never alice"
                   % label, accounts)
        self.kiosk.close_tabs()

    def scenario_login_hint(self):
        """5. --username goes to the provider as login_hint; its sign-in form is prefilled."""
        self.run.note("scenario 5: login_hint")
        self.sign_out_everything()
        self.use_broker(None)
        flow = self.begin_sign_in("notes-app", "bob-hint", hint=BOB[0])
        self.check(flow.query.get("login_hint") == [BOB[0]], "the authorization request carries login_hint=bob",
                   flow.url)
        self.check(self.wait_for_login_form(flow), "the sign-in form is shown", self.kiosk.url())
        value = self.kiosk.field("username").get_attribute("value")
        self.check(value == BOB[0], "the username field is prefilled with bob's name", value)
        self.page_evidence(self.kiosk, "sign-in-page-login-hint", self.provider.origin)
        status, out, err = self.submit(flow, BOB, "bob-hint")
        self.check(status == 0 and self.ctl.current("notes-app") == BOB[0],
                   "bob is signed in after typing his password", "status %s %s" % (status, err.strip()))
        self.kiosk.close_tabs()

    def scenario_device_code(self):
        """4. The device-code flow, approved on "the phone": a second Chromium with its own profile."""
        run = self.run
        run.note("scenario 4: device code, approved on a second (headless) Chromium")
        self.sign_out_everything()
        self.use_broker(None)
        process = self.ctl.start(["sign-in", "--client-id", "mail-app", "--device-code"], "device-code")
        line = wait_until(lambda: next((l for l in Brokerctl.err(process).splitlines() if "enter the code" in l), None),
                          20, "brokerctl's verification address and code")
        words = line.split()
        address = words[words.index("open") + 1]
        code = words[words.index("code") + 1]
        self.check(address.startswith(self.provider.base) and len(code) >= 6,
                   "brokerctl shows the verification address and a code", line)
        if self.phone is None:
            self.phone = Browser(run, "phone", run.path("profiles", "phone"), headless=True)
        self.phone.driver.get(address)
        wait_until(lambda: self.phone.loaded() and self.phone.field("user_code") is not None, 15,
                   "the verification page on the phone")
        self.page_evidence(self.phone, "device-code-page", self.provider.origin)
        self.phone.fill([("user_code", code), ("username", ALICE[0]), ("password", ALICE[1])],
                        button="button[value=approve]")
        status, out, err = self.ctl.finish(process, 30)
        self.check(status == 0 and ALICE[0] in out, "brokerctl sign-in --device-code exits 0, signed in as alice",
                   "status %s, %s %s" % (status, out.strip(), err.strip()))
        self.check(self.ctl.current("mail-app") == ALICE[0], "current-account shows alice after the phone approved")
        self.check(not self.phone.severe_from(self.provider.origin), "no SEVERE console entry on the phone after "
                   "approving")

    def scenario_closed_tab(self):
        """6. A person who closes the tab: the sign-in ends with Cancelled at the interactive deadline."""
        self.run.note("scenario 6: the tab is closed; brokerd's --interactive-timeout %d" % INTERACTIVE_DEADLINE)
        self.sign_out_everything()
        self.use_broker(None, timeout=INTERACTIVE_DEADLINE)
        flow = self.begin_sign_in("mail-app", "closed-tab")
        self.kiosk.switch(flow.tab)
        self.kiosk.driver.close()
        self.kiosk.switch(self.kiosk.home)
        closed = time.monotonic()
        status, out, err = self.ctl.finish(flow.process, INTERACTIVE_DEADLINE + 20)
        ended = time.monotonic()
        self.check(status != 0 and "Cancelled" in err, "brokerctl ends with Cancelled", "status %s: %s" % (
            status, err.strip()))
        waited = ended - flow.process.started
        self.check(INTERACTIVE_DEADLINE - 1 <= waited <= INTERACTIVE_DEADLINE + 15,
                   "it ended at the deadline (%.1f s after the start, %.1f s after the tab closed)" % (
                       waited, ended - closed))
        self.check(self.ctl.current("mail-app") is None, "nobody is signed in after the closed tab")

    def scenario_ignoring_provider(self):
        """3. A provider that ignores prompt=login and max_age: bob's sign-in must be refused."""
        run = self.run
        run.note("scenario 3: a provider that ignores prompt=login and max_age (idp-sim --ignore-reauthentication)")
        self.sign_out_everything()
        try:
            provider = Provider(run, "idp-sim-ignoring", self.users,
                                ["--ignore-reauthentication", "--issuer-path", IGNORING_PATH])
        except Failure as failure:
            self.check(False, "idp-sim --ignore-reauthentication starts", str(failure))
            return
        provider.use_authority(IGNORING_PATH)
        self.use_broker({"browserSignOut": "when-asked"}, provider=provider, state=run.path("state-ignoring"))
        self.provider, kept = provider, self.provider
        try:
            self.browser_sign_in("mail-app", ALICE, "alice-ignoring")
            self.check(bool(self.session_cookies(provider)), "Chromium holds alice's session at that provider")
            app_sign_out("calendar-app", False)(self)
            self.check(bool(self.session_cookies(provider)), "a sign-out without the browser sign-out leaves it there")
            # Alice typed her password at the start of her shift: her session is eight hours old.
            self.check(provider.age_sessions(8 * 3600) >= 1, "alice's browser session dates from the shift's start")
            flow = self.begin_sign_in("notes-app", "bob-ignoring")
            self.check(flow.query.get("prompt") == ["login"] and flow.query.get("max_age") == ["0"],
                       "the request still carries prompt=login and max_age=0", flow.url)
            self.check(not self.wait_for_login_form(flow, timeout=5),
                       "the provider sends the browser on at once, from alice's session (it ignores them)",
                       self.kiosk.url())
            status, out, err = self.ctl.finish(flow.process, 30)
            self.check(status != 0 and "AccessDenied" in err,
                       "bob's brokerctl sign-in fails with AccessDenied", "status %s: %s" % (status, err.strip()))
            self.check(any(word in err for word in ("browser session", "auth_time", "authenticated")),
                       "the message names the earlier browser session / its authentication time", err.strip())
            current = self.ctl.current("notes-app")
            self.check(current is None, "the device stays signed out (never alice)", current)
            self.check("session in the browser was ended" in err,
                       "the refusal says brokerd ended the refused browser session", err.strip())
            self.check(wait_quietly(lambda: not self.session_cookies(provider), 20),
                       "the refused sign-in's browser session ended: brokerd opened the end-session page, and "
                       "idp-sim's session cookie is gone from Chromium")
            run.note("the tab shows after the refused sign-in: %r" % self.kiosk.text().strip()[:120])
            self.kiosk.close_tabs()
        finally:
            self.provider = kept

    def scenario_portal(self):
        """7. Every page went through org.freedesktop.portal.OpenURI; no fallback was used."""
        self.run.note("scenario 7: every page through the real portal")
        brokers = {broker.unique_name for broker in self.brokers}
        calls = [(sender, url, token) for sender, url, token in self.monitor.open_uri_calls() if sender in brokers]
        responses = [(destination, path, code) for destination, path, code in self.monitor.responses()
                     if destination in brokers]
        told = set()
        for name in os.listdir(self.run.directory):
            if name.startswith("brokerctl-") and name.endswith(".err"):
                told.update(line.split(": ", 1)[1] for line in open(self.run.path(name)).read().splitlines()
                            if line.startswith("Continue in your browser: "))
        opened = {url for _, url, _ in calls}
        self.check(opened and all("/start/" in url and not any(secret in url for secret in (
                       "state=", "code_challenge", "id_token_hint")) for url in opened),
                   "every page brokerd handed the portal (%d) was a one-time local start address, with no state, "
                   "PKCE challenge or ID token" % len(opened), sorted(opened))
        self.check(told and told <= opened and any(
                       target.startswith(urllib.parse.urlparse(self.provider.logout).path)
                       for target in self.provider.browser_requests()),
                   "every sign-in page brokerctl was told was opened (%d), and the end-session pages, went through "
                   "OpenURI (%d calls by brokerd on the private bus)" % (len(told), len(calls)),
                   sorted(told - opened))
        codes = [code for _, _, code in responses]
        self.check(len(responses) == len(calls) and set(codes) == {0},
                   "the portal answered each call with Response 0 (it launched the default browser, no chooser)",
                   "%d calls, response codes %s" % (len(calls), codes))
        # The handle_token convention: brokerd subscribes to the request path it names before it
        # calls, so that the portal's answer cannot arrive unheard. The portal takes the token only
        # when it is a string (a variant of type s in the options vardict).
        expected = {"/org/freedesktop/portal/desktop/request/%s/%s" % (sender[1:].replace(".", "_"), token)
                    for sender, _, token in calls}
        unexpected = sorted({path for _, path, _ in responses if path not in expected})
        self.check(not unexpected, "the portal's Response came on the request path brokerd named (handle_token)",
                   "the portal answered on %s; brokerd's options were: %s" % (
                       ", ".join(unexpected), self.monitor.handle_token_lines()[:1]))
        self.check(all(b"BROWSER" not in broker.environment for broker in self.brokers),
                   "BROWSER is not set in brokerd's environment")
        self.check(not os.path.exists(self.tripwire), "no xdg-open fallback ran",
                   open(self.tripwire).read() if os.path.exists(self.tripwire) else "")
        logs = "".join(broker.log() for broker in self.brokers)
        self.check("trying a browser command" not in logs and "no browser could be opened" not in logs,
                   "brokerd's debug log shows no fallback from the portal")


def wait_quietly(predicate, timeout):
    try:
        return wait_until(predicate, timeout, "")
    except Failure:
        return None


def package_version(name):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True,
                              timeout=10).stdout or "?"
    except Exception:
        return "?"


def chromium_browsers(profile):
    """The Chromium browser processes (not renderers or helpers) running with `profile`: {pid: command line}."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            # Chromium rewrites its command line as one string (its process title): words are
            # separated by spaces or by NULs.
            words = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode(errors="replace").split()
        except OSError:
            continue
        if "--user-data-dir=" + profile in words and not any(w.startswith("--type=") for w in words):
            found[int(pid)] = " ".join(words)[:200]
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--broker-bin", required=True)
    parser.add_argument("--artifacts")
    args = parser.parse_args()
    started = time.monotonic()
    run = Run(args)
    for old in os.listdir(run.artifacts):
        if old.endswith(".png"):
            os.remove(os.path.join(run.artifacts, old))
    # The kernel's boot id, as brokerd reads it in tests (BROKERD_BOOT_ID_FILE): the reboot cause
    # writes a new one.
    run.env["BROKERD_BOOT_ID_FILE"] = run.path("boot_id")
    with open(run.env["BROKERD_BOOT_ID_FILE"], "w") as boot:
        boot.write("%032x\n" % 1)
    suite = Suite(run)
    steps = [("setup", suite.setup), ("1 PKCE sign-in", suite.scenario_pkce_sign_in),
             ("1b tutorial app", suite.scenario_tutorial_app)]
    steps += [("2%s two people" % cause.key, lambda cause=cause: suite.scenario_two_people(cause))
              for cause in SIGN_OUT_CAUSES]
    steps += [("3 ignoring provider", suite.scenario_ignoring_provider), ("4 device code", suite.scenario_device_code),
              ("5 login_hint", suite.scenario_login_hint), ("6 closed tab", suite.scenario_closed_tab),
              ("7 portal", suite.scenario_portal)]
    try:
        for name, step in steps:
            begun = time.monotonic()
            try:
                step()
            except Exception as failure:  # a Failure (a wait ran out) or a broken step: the others still run
                detail = str(failure) if isinstance(failure, Failure) else "".join(
                    traceback.format_exception(failure)[-2:]).strip()
                run.check(False, "%s ran to the end" % name, detail)
                if name == "setup":
                    break  # nothing to run the other steps with
                try:
                    suite.kiosk.screenshot("failure-%d" % run.checks)
                    suite.kiosk.close_tabs()
                except Exception:
                    pass
            run.note("%s: %.1f s" % (name, time.monotonic() - begun))
    finally:
        run.stop_all()
    logs = os.path.join(run.artifacts, "logs")
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    for name in os.listdir(run.directory):
        if name.endswith((".log", ".out", ".err", ".json", ".conf")):
            shutil.copy(run.path(name), logs)
    shutil.rmtree(run.directory, ignore_errors=True)
    run.note("screenshots in %s, logs in %s" % (run.artifacts, logs))
    run.note("the suite took %.1f s" % (time.monotonic() - started))
    print("%d passed, %d failed" % (run.checks - run.failures, run.failures), flush=True)
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
