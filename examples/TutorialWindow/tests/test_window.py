#!/usr/bin/python3
"""The tutorial window, tested as a person and a screen reader use it.

A headless X server (Xvfb), a private session bus with the accessibility bus, the real idp-sim and
brokerd, and two windows of tutorial-window acting as two apps ("Mail" and "Calendar"), driven
through AT-SPI (pyatspi): buttons are clicked with their accessible action, text is typed with
EditableText, and what the windows show is read from their accessible tree.

"Sign in with browser" is tested through the real desktop portal, as the browser suite does it
(Tests/Browser/harness.py, imported from here): the private bus also activates xdg-desktop-portal,
xdg-desktop-portal-gtk and xdg-permission-store; brokerd has no BROWSER (and a tripwire xdg-open),
so it opens pages with org.freedesktop.portal.OpenURI; the portal launches the kiosk's default
browser (a private mimeapps.list and .desktop file), which hands each page to the one Chromium under
the same Xvfb, driven by Selenium (chromedriver). Selenium types alice's password into idp-sim's
sign-in form, the redirect reaches brokerd's loopback listener, and both windows show alice; Sign
Out in Mail puts both back on the sign-in page and, shared mode's browserSignOut being "always",
loads idp-sim's end-session page in Chromium. The portal's OpenURI calls are read with dbus-monitor.

Sign-out after inactivity, as a person sees it: brokerd restarted with idleSignOutSeconds and
idleWarningSeconds of a few seconds, its idle source the X server's own idle time (org.freedesktop.
ScreenSaver's GetSessionIdleTime, served by screensaver_idle.py from MIT-SCREEN-SAVER). Sign in
and keep still: both windows show the countdown, which falls; a real click (xdotool, XTEST) on
Mail's "Stay signed in" is input, brokerd withdraws the warning and the banners go; keep still
again past the deadline: both windows say the device was signed out after inactivity.

Usage: test_window.py --window-bin DIR --broker-bin DIR [--artifacts DIR]
  DIR of tutorial-window (with locale/ beside it), DIR of brokerd, idp-sim and brokerctl.
  Needs what `make gui-deps` and `make browser-deps` install (`make test-gui` runs both).
Prints one line per check (ok / not ok) and the figures; exit status 0 when every check passed.
Screenshots of the windows in each state (N-state.png) and of Chromium's pages (N-chromium-*.png)
are saved in ARTIFACTS.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
# The browser suite's pieces (Tests/Browser/harness.py): the real desktop portal on a private bus,
# the kiosk's default browser, and the Selenium-driven Chromium the portal hands pages to.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "Tests", "Browser"))

import harness  # noqa: E402
import screenshot  # noqa: E402
from harness import Failure  # noqa: E402

ALICE = ("alice@contoso.example", "alice-Passw0rd!")
USERS = {
    "users": [
        {"username": "carol@contoso.example", "displayName": "Carol Example", "email": "carol@contoso.example",
         "authMethods": ["emailOtp"]},
        {"username": ALICE[0], "password": ALICE[1], "displayName": "Alice Example", "email": ALICE[0]},
    ],
    "clients": [{"clientId": c, "family": "1"} for c in ("mail-app", "calendar-app", "notes-app")],
}


class Run:
    """Every process of the test, stopped at the end in reverse order."""

    def __init__(self, args):
        self.args = args
        self.directory = tempfile.mkdtemp(prefix="tutorial-window-test-")
        self.artifacts = os.path.abspath(args.artifacts or os.path.join(self.directory, "artifacts"))
        os.makedirs(self.artifacts, exist_ok=True)
        for old in os.listdir(self.artifacts):
            if old.endswith(".png"):
                os.remove(os.path.join(self.artifacts, old))
        self.processes = []
        self.failures = 0
        self.checks = 0
        self.last_screen = None
        self.broker_names = set()
        self.env = dict(os.environ)
        # BROWSER too: brokerd opens pages through the desktop portal on the private bus.
        for key in ("DBUS_SESSION_BUS_ADDRESS", "WAYLAND_DISPLAY", "AT_SPI_BUS_ADDRESS", "NO_AT_BRIDGE", "GTK_A11Y",
                    "BROWSER", "XDG_SESSION_TYPE", "XDG_SESSION_DESKTOP", "DESKTOP_SESSION", "XDG_CONFIG_DIRS",
                    "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "GIO_LAUNCHED_DESKTOP_FILE"):
            self.env.pop(key, None)
        runtime = os.path.join(self.directory, "runtime")
        os.makedirs(runtime, mode=0o700)
        self.env.update({"XDG_RUNTIME_DIR": runtime, "LANG": "C.UTF-8", "LANGUAGE": "", "HOME": self.directory})
        # The kiosk's desktop (XDG_CURRENT_DESKTOP, GSETTINGS_BACKEND=memory, a private XDG_CONFIG_HOME
        # and XDG_DATA_DIRS) whose default browser is the Chromium of this profile.
        self.profile = self.path("profiles", "kiosk")
        self.env.update(harness.desktop_environment(self.directory))
        harness.write_default_browser(self.directory, self.profile)
        os.makedirs(self.path("tripwire"))
        self.tripwire = harness.install_tripwire(self)

    def path(self, *parts):
        return os.path.join(self.directory, *parts)

    # Processes

    def start(self, name, argv, env=None, ready=None, timeout=30):
        """Starts argv; with `ready`, waits (bounded) for a line of its standard output that starts so."""
        log_path = os.path.join(self.directory, name + ".log")
        log = open(log_path, "w")
        process = subprocess.Popen(argv, env=env or self.env, stdout=subprocess.PIPE if ready else log,
                                   stderr=log, stdin=subprocess.DEVNULL, close_fds=True, text=True)
        process.log_path = log_path
        self.processes.append((name, process))
        if ready:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line:
                    raise Failure("%s ended before it was ready; see %s.log" % (name, name))
                if line.startswith(ready):
                    return process, line.strip()
            raise Failure("%s was not ready within %d s" % (name, timeout))
        return process, None

    def add(self, name, process):
        """Something to stop with the processes (the kiosk's Chromium: poll, terminate, wait, kill)."""
        self.processes.append((name, process))

    def stop_all(self):
        for _, process in reversed(self.processes):
            try:
                if process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        process.kill()
            except Exception:
                pass

    def start_display(self):
        for number in range(90, 190):
            if not os.path.exists("/tmp/.X11-unix/X%d" % number) and not os.path.exists("/tmp/.X%d-lock" % number):
                break
        display = ":%d" % number
        self.start("xvfb", ["Xvfb", display, "-screen", "0", "1100x800x24", "-nolisten", "tcp"])
        socket = "/tmp/.X11-unix/X%d" % number
        wait_until(lambda: os.path.exists(socket), 20, "the X server's socket")
        self.env["DISPLAY"] = display

    def start_bus(self):
        # A private bus whose activatable services are those of a desktop that matter here:
        # org.a11y.Bus (the accessibility bus), and the real desktop portal with its GTK backend
        # and the permission store (the browser suite's activation files), started by this bus
        # with its environment (the display, the kiosk's desktop and default browser).
        services = self.path("services")
        harness.write_portal_services(services, {"org.a11y.Bus": a11y_bus_launcher()})
        config = harness.write_bus_config(self.path("bus.conf"), self.env["XDG_RUNTIME_DIR"], services)
        _, address = self.start("dbus-daemon", ["dbus-daemon", "--config-file", config, "--nofork",
                                                "--print-address"], ready="unix:")
        self.env["DBUS_SESSION_BUS_ADDRESS"] = address
        self.desktop = harness.PrivateDesktop.on_bus(self, address)
        # This process reads the windows through AT-SPI on that bus and display, never the developer's.
        os.environ.clear()
        os.environ.update(self.env)

    def start_provider(self):
        users = os.path.join(self.directory, "users.json")
        with open(users, "w") as out:
            json.dump(USERS, out)
        binary = os.path.join(self.args.broker_bin, "idp-sim")
        # Approval on a phone is polled every second, so that the test waits as little as a person.
        _, line = self.start("idp-sim", [binary, "--port", "0", "--users", users, "--ciba-interval", "1"],
                             ready="listening on ")
        self.idp = line[len("listening on "):]
        # The users file names no tenant: idp-sim's default, a GUID.
        self.authority = self.idp + "/4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20/v2.0"
        with urllib.request.urlopen(self.authority + "/.well-known/openid-configuration", timeout=10) as response:
            metadata = json.load(response)
        self.authorize = metadata["authorization_endpoint"]
        self.logout = metadata["end_session_endpoint"]

    def start_broker(self, extra=()):
        binary = os.path.join(self.args.broker_bin, "brokerd")
        # No BROWSER (see __init__); a tripwire xdg-open first on PATH records any fallback from the portal.
        env = dict(self.env, PATH=self.path("tripwire") + ":" + self.env.get("PATH", "/usr/bin:/bin"))
        self.broker, _ = self.start(
            "brokerd-%d" % (len(self.broker_names) + 1),
            [binary, "--device-mode", "shared", "--authority", self.authority, "--state-dir",
             os.path.join(self.directory, "state"), "--token-storage", "plaintext-file", "--log-level", "debug",
             *extra], env=env, ready="brokerd ready:")
        self.broker_names.add(self.desktop.name_owner(harness.BROKER_NAME))

    def start_kiosk_browser(self):
        """The real portal (activated, bounded), a bus monitor of its OpenURI calls, and the kiosk's
        Chromium under this display, driven by Selenium, which the portal's launches hand pages to."""
        self.monitor = harness.BusMonitor(self, self.env["DBUS_SESSION_BUS_ADDRESS"])
        version = self.desktop.start_portal()
        self.check(version >= 3, "the real xdg-desktop-portal serves OpenURI (version %d) on the private bus, beside "
                   "the accessibility bus" % version)
        self.kiosk = harness.Browser(self, "kiosk", self.profile)
        print("# Chromium %s under the same Xvfb, its profile the default browser's" % self.kiosk.version, flush=True)

    def opened_by_broker(self, prefix, since):
        """Addresses brokerd handed to the portal's OpenURI, starting with `prefix`, after the first `since` calls."""
        return [url for sender, url, _ in self.monitor.open_uri_calls()[since:]
                if sender in self.broker_names and url and url.startswith(prefix)]

    def started_by_broker(self, since):
        """The one-time start addresses (http://127.0.0.1:PORT/start/ID) brokerd handed to OpenURI after
        the first `since` calls: it gives the browser nothing else, so no secret is on a command line."""
        return [url for url in self.opened_by_broker("http://127.0.0.1:", since) if "/start/" in url]

    def browser_request(self, endpoint, start):
        """The request the browser made at idp-sim's `endpoint` after following `start` (idp-sim's
        test record of it, as a URL; for the authorization endpoint, the one whose redirect_uri is
        the listener behind `start`); None until then."""
        redirect = "http://127.0.0.1:%d/" % urllib.parse.urlparse(start).port
        with urllib.request.urlopen(self.idp + "/test/browser-requests", timeout=10) as response:
            targets = json.load(response)
        for target in reversed(targets):
            url = self.idp + target
            if url.startswith(endpoint) and (endpoint != self.authorize or urllib.parse.parse_qs(
                    urllib.parse.urlparse(url).query).get("redirect_uri") == [redirect]):
                return url
        return None

    def start_window(self, app_name, client_id, language=""):
        env = dict(self.env)
        if language:
            env["LANGUAGE"] = language
        binary = os.path.join(self.args.window_bin, "tutorial-window")
        process, _ = self.start("window-" + app_name, [binary, "--app-name", app_name, "--client-id", client_id],
                                env=env)
        return Window(self, process, app_name)

    # Checks

    def check(self, condition, what, details=""):
        self.checks += 1
        if condition:
            print("ok %d - %s" % (self.checks, what), flush=True)
        else:
            self.failures += 1
            print("not ok %d - %s%s" % (self.checks, what, (": " + details) if details else ""), flush=True)
        return condition

    def snap(self, state, windows):
        """Saves the windows side by side as ARTIFACTS/state.png (each drawn by itself, through its
        app.screenshot action: without a window manager they overlap on screen); checks the picture
        is neither blank nor the same as the state before."""
        path = os.path.join(self.artifacts, state + ".png")
        image = screenshot.side_by_side([window.screenshot(state) for window in windows])
        image.save(path)
        data = image.tobytes()
        self.check(screenshot.colours(image) > 8, "screenshot %s is not blank" % state)
        if self.last_screen is not None:
            self.check(data != self.last_screen, "screenshot %s differs from the state before" % state)
        self.last_screen = data

    def latest_code(self, username):
        with urllib.request.urlopen(self.idp + "/test/outbox", timeout=10) as response:
            sent = json.load(response)
        codes = [entry["code"] for entry in sent if entry.get("username") == username]
        return codes[-1] if codes else None


def a11y_bus_launcher():
    """What the machine's activation file of org.a11y.Bus runs (at-spi2-core's launcher)."""
    try:
        with open("/usr/share/dbus-1/services/org.a11y.Bus.service") as service:
            for line in service:
                if line.startswith("Exec="):
                    return line[len("Exec="):].strip()
    except OSError:
        pass
    return "/usr/libexec/at-spi-bus-launcher"


def wait_until(predicate, timeout, what, interval=0.02):
    """Polls `predicate` until it is true; the deadline bounds the wait (the UI has no readiness line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # a widget may vanish between two queries
            value = None
        if value:
            return value
        time.sleep(interval)
    raise Failure("timed out after %d s waiting for %s" % (timeout, what))


class Window:
    """One tutorial-window process, read and driven through its accessible tree."""

    def __init__(self, run, process, app_name):
        self.run = run
        self.process = process
        self.app_name = app_name
        import pyatspi
        self.pyatspi = pyatspi
        self.frame = wait_until(self._find_frame, 30, "the %s window on the accessibility bus" % app_name, 0.1)

    def _find_frame(self):
        for app in self.pyatspi.Registry.getDesktop(0):
            if app is None or app.get_process_id() != self.process.pid:
                continue
            for child in app:
                if child.getRoleName() == "frame":
                    return child
        return None

    def nodes(self, role=None):
        """Every showing node of the window (of `role`)."""
        found = []

        def walk(node):
            if node is None:
                return
            state = node.getState()
            # GTK 4 marks what is shown VISIBLE (SHOWING only on the window); hidden widgets are not.
            if not state.contains(self.pyatspi.STATE_VISIBLE):
                return
            if role is None or node.getRoleName() == role:
                found.append(node)
            for child in node:
                walk(child)

        walk(self.frame)
        return found

    def find(self, role, name, timeout=20):
        return wait_until(lambda: next((n for n in self.nodes(role) if n.name == name), None), timeout,
                          "%s %r in %s" % (role, name, self.app_name))

    def click(self, name):
        self.find("push button", name).queryAction().doAction(0)

    def click_with_pointer(self, name):
        """Clicks the button as a person does: real X input (xdotool, through XTEST) at the button's
        place in the window as AT-SPI gives it, after raising the window above the others (no window
        manager: the windows overlap). AT-SPI's action would be no input to the X server."""
        button = self.find("push button", name)
        x, y, width, height = button.queryComponent().getExtents(self.pyatspi.WINDOW_COORDS)
        window = self.x_window()
        subprocess.run(["xdotool", "windowraise", window], env=self.run.env, check=True, timeout=10)
        subprocess.run(["xdotool", "mousemove", "--window", window, str(x + width // 2), str(y + height // 2),
                        "click", "1"], env=self.run.env, check=True, timeout=10)

    def x_window(self):
        """The X window of this app's frame (its title is the app's name), for xdotool."""
        found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "^%s$" % self.app_name],
                               env=self.run.env, capture_output=True, text=True, timeout=10).stdout.split()
        if len(found) != 1:
            raise Failure("%d visible X windows are titled %s, not one" % (len(found), self.app_name))
        return found[0]

    def countdown(self):
        """The seconds the sign-out warning's banner shows, or None when it shows none."""
        for text in self.labels():
            match = COUNTDOWN.fullmatch(text)
            if match:
                return int(match.group(1))
        return None

    def log_text(self):
        return self.find("text", "Log", 10).queryText().getText(0, -1)

    def type(self, role, name, text):
        self.find(role, name).queryEditableText().setTextContents(text)

    def labels(self):
        return [n.name for n in self.nodes("label")]

    def account_line(self):
        return next((text for text in self.labels() if text.startswith("Signed in:") or text == "Nobody is signed in"),
                    None)

    def wait_for_account(self, expected, timeout=20):
        # The description is made before the wait, while the window may be switching pages (a
        # widget read then can vanish under the reader): it names what is awaited only.
        return wait_until(lambda: (self.account_line() or "").startswith(expected), timeout,
                          "%s to show %r" % (self.app_name, expected))

    def activate_action(self, action, parameter=None):
        """Activates app.ACTION over the bus, as another program (or GNOME Shell) would."""
        subprocess.run(
            ["gdbus", "call", "--session", "--dest", "io.shareddevice.Tutorial." + self.app_name, "--object-path",
             "/io/shareddevice/Tutorial/" + self.app_name, "--method", "org.gtk.Actions.Activate", action,
             "[%s]" % parameter if parameter else "[]", "{}"], env=self.run.env, check=True, capture_output=True,
            timeout=10)

    def screenshot(self, state):
        """The window as it draws itself now, as a PIL image."""
        path = os.path.join(self.run.artifacts, "%s-%s.png" % (state, self.app_name))
        if os.path.exists(path):
            os.remove(path)
        self.activate_action("screenshot", "<%s>" % json.dumps(path))
        wait_until(lambda: os.path.exists(path) and os.path.getsize(path) > 0, 10, "the screenshot " + path)
        from PIL import Image
        image = Image.open(path)
        image.load()
        return image

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=10)


# Sign-out after inactivity, in seconds: brokerd warns after IDLE_SIGN_OUT - IDLE_WARNING without
# input, and signs out IDLE_WARNING later. The warning must outlast what the test does in it (read the
# countdown twice, two screenshots, find and click the button) on a busy machine; the window test
# runs alone, after the Swift suites, so a few seconds of room are enough.
IDLE_SIGN_OUT = 16
IDLE_WARNING = 12
COUNTDOWN = re.compile(r"You will be signed out in (\d+) s because of inactivity")


def scenario(run):
    # Without a display the program says so and exits with status 1.
    headless = dict(run.env)
    headless.pop("DISPLAY", None)
    result = subprocess.run([os.path.join(run.args.window_bin, "tutorial-window")], env=headless,
                            capture_output=True, text=True, timeout=30)
    run.check(result.returncode == 1 and "no display" in result.stderr,
              "without a display: a message and exit status 1", "%d %s" % (result.returncode, result.stderr))

    run.start_display()
    run.start_bus()
    run.start_kiosk_browser()
    run.start_provider()
    run.start_broker()
    mail = run.start_window("Mail", "mail-app")
    calendar = run.start_window("Calendar", "calendar-app")
    mail.wait_for_account("Nobody is signed in")
    calendar.wait_for_account("Nobody is signed in")
    run.snap("1-nobody-signed-in", [mail, calendar])

    # Sign in through Mail with an emailed code, a wrong one first.
    carol = "carol@contoso.example"
    mail.type("text", "Email", carol)
    mail.click("Send code")
    mail.find("text", "Code")
    wrong = "000000" if run.latest_code(carol) != "000000" else "111111"
    mail.type("text", "Code", wrong)
    # A label that was not there before: the page's own text mentions codes too. Until the refusal
    # is shown, the click may not have been handled yet (GTK runs an AT-SPI action later), and a
    # code typed now would be the one it sends.
    before = set(mail.labels())
    mail.click("Sign in with code")
    problem = wait_until(lambda: next((t for t in mail.labels() if "code" in t.lower() and t not in before), None),
                         20, "the wrong code to be explained")
    run.check(bool(problem), "a wrong code is explained beside the field", problem)
    run.snap("2-wrong-code", [mail, calendar])
    mail.type("text", "Code", run.latest_code(carol))
    mail.click("Sign in with code")
    mail.wait_for_account("Signed in: " + carol)
    run.check(True, "Mail signed in with the emailed code after a wrong one (the flow stayed usable)")
    calendar.wait_for_account("Signed in: " + carol)
    run.check(True, "Calendar shows the account Mail signed in, without signing in itself")
    run.snap("3-signed-in", [mail, calendar])

    # Calendar calls Graph with a token of its own (single sign-on across apps).
    calendar.click("Call Microsoft Graph API")
    profile = wait_until(lambda: next((t for t in calendar.labels() if t.startswith("Name: ")), None), 20,
                         "the profile in Calendar")
    run.check("Carol Example" in profile, "Calendar shows the profile's display name from /v1.0/me", profile)
    run.snap("4-profile", [mail, calendar])

    # Calendar signs out, from the browser too; Mail goes back to the sign-in page.
    switch = calendar.find("check box", "Also sign out of the browser")
    switch.queryAction().doAction(0)
    wait_until(lambda: switch.getState().contains(calendar.pyatspi.STATE_CHECKED), 10, "the browser switch to be on")
    known = run.kiosk.handles()
    started = time.monotonic()
    calendar.click("Sign Out")
    mail.wait_for_account("Nobody is signed in", timeout=20)
    elapsed = (time.monotonic() - started) * 1000
    # An upper bound: each look at Mail walks its accessible tree over AT-SPI (tens of D-Bus calls).
    print("# figure: %.0f ms from the click on Sign Out in Calendar to Mail's sign-in page, as AT-SPI reads it"
          % elapsed, flush=True)
    run.check(True, "Sign Out in Calendar puts Mail on the sign-in page")
    run.check(not any(t.startswith("Name: ") for t in calendar.labels()), "the profile is cleared after sign-out")
    run.check(not any(t.startswith("Signed out") for t in mail.labels()),
              "an app's Sign Out gives Mail no reason line (someone asked for it)", str(mail.labels()))
    run.snap("5-signed-out", [mail, calendar])
    # Carol signed in with a code, but the provider's end-session page is opened all the same:
    # through the portal, in the kiosk's Chromium (closed here; the browser part below checks it).
    run.check(bool(wait_quietly(lambda: run.kiosk.wait_for_tab(known, run.logout, 20, "the end-session page"), 25)),
              "Calendar's sign-out opened idp-sim's end-session page in Chromium, through the portal")
    run.kiosk.close_tabs()

    # The broker stops: the window says so and offers to retry; it recovers when the broker is back.
    run.broker.send_signal(signal.SIGTERM)
    run.broker.wait(timeout=15)
    mail.activate_action("refresh")
    mail.find("push button", "Retry")
    run.check(True, "with the broker stopped, Mail shows the retry state")
    run.snap("6-broker-stopped", [mail, calendar])
    run.start_broker()
    # The client library hears the broker come back (its name's new owner), so the window leaves
    # the retry state by itself; Retry is for a broker that does not come back on its own.
    mail.wait_for_account("Nobody is signed in")
    run.check(not any(n.name == "Retry" for n in mail.nodes("push button")),
              "when the broker is back, Mail shows the sign-in page again by itself, without Retry")
    calendar.wait_for_account("Nobody is signed in")

    browser_sign_in_and_out(run, mail, calendar)
    phone_sign_in(run, mail, calendar)
    idle_sign_out(run, mail, calendar)

    # Translations, read through the accessible tree.
    mail.close()
    calendar.close()
    for language, expected in (("es", ["Enviar código", "Iniciar sesión con contraseña", "Dispositivo compartido"]),
                               ("nl", ["Code versturen", "Aanmelden met wachtwoord", "Gedeeld apparaat"])):
        window = run.start_window("Notes", "notes-app", language=language)
        names = wait_until(lambda: set(n.name for n in window.nodes()) >= set(expected) and
                           set(n.name for n in window.nodes()), 20, "the %s labels" % language)
        run.check(set(expected) <= names, "LANGUAGE=%s shows translated labels" % language, str(expected))
        run.snap("12-%s" % language, [window])
        window.close()


def browser_sign_in_and_out(run, mail, calendar):
    """"Sign in with browser" in Mail: brokerd opens the sign-in page through the real desktop portal,
    which hands it to the kiosk's Chromium; Selenium types there as a person would; the redirect
    comes back to brokerd and both windows show the account. Then Sign Out in Mail: both windows go
    back to the sign-in page, and (shared mode's browserSignOut "always") the provider's end-session
    page loads in Chromium."""
    started = time.monotonic()
    kiosk = run.kiosk
    kiosk.close_tabs()
    known = kiosk.handles()
    since = len(run.monitor.open_uri_calls())
    kiosk.drain_console()

    mail.type("text", "Email", ALICE[0])
    mail.click("Sign in with browser")
    mail.find("label", "Continue in your browser")
    run.check(True, "Mail shows it waits for the browser after \"Sign in with browser\"")
    tab = kiosk.wait_for_tab(known, run.authorize, 30, "the sign-in page as a new tab of the kiosk's Chromium")
    starts = wait_until(lambda: run.started_by_broker(since), 10, "brokerd's OpenURI call on the bus")
    start = starts[-1]
    run.check(len(starts) == 1 and not any(secret in start for secret in ("state=", "code_challenge", "nonce=")),
              "brokerd asked the portal (OpenURI) to open a one-time local start address, with neither state nor "
              "PKCE challenge in it", start)
    url = wait_until(lambda: run.browser_request(run.authorize, start), 15, "the authorization request at idp-sim")
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    run.check(query.get("client_id") == ["mail-app"] and query.get("login_hint") == [ALICE[0]]
              and query.get("code_challenge_method") == ["S256"],
              "Chromium followed it to idp-sim's authorization page for mail-app, with the Email field as "
              "login_hint", url)
    kiosk.switch(tab)
    run.check(kiosk.url() == url and len(kiosk.handles()) == len(known) + 1,
              "the page arrived as a new tab of the Selenium-driven Chromium, at the address the start address "
              "sent it to", kiosk.url())
    wait_until(kiosk.login_form, 15, "idp-sim's sign-in form in Chromium")
    shown = time.time()
    run.check(kiosk.field("username").get_attribute("value") == ALICE[0],
              "Chromium shows idp-sim's sign-in form, the username filled from login_hint")
    log = wait_until(lambda: next((n for n in mail.nodes("text") if n.name == "Log"), None), 10, "Mail's log")
    text = log.queryText().getText(0, -1)
    run.check("Continue in your browser: " + start in text, "Mail's log names the page brokerd opened",
              text[-300:])
    run.snap("7-browser-waiting", [mail, calendar])
    page_screenshot(run, "7-chromium-sign-in-page")

    # As a person types: the username field cleared and typed again, the password, the button; not
    # within a second or so of the page (brokerd refuses an authentication it cannot tell from one
    # made before the sign-in began: auth_time is whole seconds).
    due = int(shown + 1.5) + 1
    if time.time() < due:
        time.sleep(due - time.time())
    kiosk.fill([("username", ALICE[0]), ("password", ALICE[1])])
    redirect = query.get("redirect_uri", ["?"])[0]
    wait_until(lambda: kiosk.url().startswith(redirect) and kiosk.loaded() and kiosk.text(), 20,
               "the redirect to brokerd's loopback listener")
    run.check(redirect.startswith("http://127.0.0.1:") and "return to the app" in kiosk.text().lower(),
              "the provider's redirect reached brokerd's loopback listener (%s)" % redirect, kiosk.text())
    page_screenshot(run, "8-chromium-redirect")
    mail.wait_for_account("Signed in: " + ALICE[0])
    run.check(True, "Mail shows alice, signed in in the browser")
    calendar.wait_for_account("Signed in: " + ALICE[0])
    run.check(True, "Calendar shows alice too, without signing in itself")
    run.check(not any(n.name == "Continue in your browser" for n in mail.nodes("label")),
              "Mail no longer shows it waits for the browser")
    run.snap("8-browser-signed-in", [mail, calendar])
    run.check(bool(session_cookies(run)), "Chromium holds idp-sim's session cookie")
    kiosk.close_tabs()

    # Sign Out in Mail, its browser switch left off: shared mode's browserSignOut "always" opens
    # the end-session page all the same.
    known = kiosk.handles()
    since = len(run.monitor.open_uri_calls())
    switch = mail.find("check box", "Also sign out of the browser")
    run.check(not switch.getState().contains(mail.pyatspi.STATE_CHECKED), "Mail's browser sign-out switch is off")
    mail.click("Sign Out")
    mail.wait_for_account("Nobody is signed in")
    calendar.wait_for_account("Nobody is signed in")
    run.check(True, "Sign Out in Mail puts both windows back on the sign-in page")
    wait_until(lambda: run.started_by_broker(since), 20, "brokerd's OpenURI call of the end-session page")
    run.check(True, "brokerd asked the portal to open idp-sim's end-session page, through a one-time start address "
              "(browserSignOut always)")
    kiosk.wait_for_tab(known, run.logout, 20, "the end-session page as a new tab of the kiosk's Chromium")
    wait_until(lambda: kiosk.loaded() and "signed out" in kiosk.text().lower(), 15, "the end-session page's text")
    run.check(True, "the end-session page loaded in Chromium", kiosk.url())
    page_screenshot(run, "9-chromium-end-session-page")
    run.check(bool(wait_quietly(lambda: not session_cookies(run), 10)), "idp-sim's session cookie is gone from "
              "Chromium")
    run.snap("9-browser-signed-out", [mail, calendar])
    kiosk.close_tabs()

    # Every page of brokerd went through the portal, which launched the default browser.
    calls = [call for call in run.monitor.open_uri_calls() if call[0] in run.broker_names]
    responses = [code for destination, _, code in run.monitor.responses() if destination in run.broker_names]
    run.check(calls and len(responses) == len(calls) and set(responses) == {0},
              "the portal answered each of brokerd's %d OpenURI calls with Response 0 (no chooser, no failure)"
              % len(calls), "response codes %s" % responses)
    with open("/proc/%d/environ" % run.broker.pid, "rb") as environ:
        names = [item.split(b"=", 1)[0] for item in environ.read().split(b"\0")]
    run.check(b"BROWSER" not in names, "BROWSER is not set in brokerd's environment")
    run.check(not os.path.exists(run.tripwire), "brokerd used no xdg-open fallback",
              open(run.tripwire).read() if os.path.exists(run.tripwire) else "")
    logs = "".join(open(run.path(name), errors="replace").read() for name in os.listdir(run.directory)
                   if name.startswith("brokerd-") and name.endswith(".log"))
    run.check("trying a browser command" not in logs and "no browser could be opened" not in logs,
              "brokerd's debug log shows no fallback from the portal")
    severe = kiosk.severe_from(run.idp)
    run.check(not severe, "no SEVERE console entry from idp-sim in Chromium",
              "; ".join(entry.get("message", "") for entry in severe))
    print("# figure: %.1f s for the browser part (sign-in through the portal and Chromium, sign-out, end-session "
          "page)" % (time.monotonic() - started), flush=True)


def phone_requests(run, username):
    """What idp-sim's simulated phone of `username` shows waiting: its app's view, over HTTP."""
    query = urllib.parse.urlencode({"username": username})
    with urllib.request.urlopen(run.idp + "/phone/requests?" + query, timeout=10) as response:
        return json.load(response)["requests"]


def phone_answer(run, request_id, action):
    body = urllib.parse.urlencode({"action": action}).encode()
    with urllib.request.urlopen(run.idp + "/phone/requests/" + request_id, data=body, timeout=10) as response:
        return response.status


def phone_sign_in(run, mail, calendar):
    """"Approve on my phone" in Mail (OpenID Connect CIBA): the window shows the code the phone shows
    too; a request cancelled in the window signs nobody in when approved later; approved on the
    phone, both windows show the account."""
    PREFIX = "Approve the sign-in on your phone if it shows "
    mail.type("text", "Email", ALICE[0])
    mail.click("Approve on my phone")
    shown = wait_until(lambda: next((t for t in mail.labels() if t.startswith(PREFIX)), None), 20,
                       "Mail to show the code the phone shows")[len(PREFIX):]
    waiting = phone_requests(run, ALICE[0])
    run.check(len(waiting) == 1 and waiting[0]["binding_message"] == shown,
              "alice's phone shows the code Mail shows (%s)" % shown, str(waiting))
    run.snap("10a-approve-on-phone", [mail, calendar])

    # The person walks away: Cancel; an approval afterwards signs nobody in.
    mail.click("Cancel approval")
    wait_until(lambda: not any(t.startswith(PREFIX) for t in mail.labels()), 20, "the code to go after Cancel")
    run.check(phone_answer(run, waiting[0]["id"], "approve") == 200, "the cancelled request approved on the phone")
    time.sleep(2)  # two poll intervals: a poll still running would sign alice in
    run.check((mail.account_line() or "") == "Nobody is signed in",
              "a request cancelled in Mail signs nobody in when approved later", str(mail.account_line()))

    mail.click("Approve on my phone")
    shown = wait_until(lambda: next((t for t in mail.labels() if t.startswith(PREFIX)), None), 20,
                       "Mail to show the new code")[len(PREFIX):]
    request = next(r for r in phone_requests(run, ALICE[0]) if r["binding_message"] == shown)
    run.check(phone_answer(run, request["id"], "approve") == 200, "approved on alice's phone")
    mail.wait_for_account("Signed in: " + ALICE[0])
    calendar.wait_for_account("Signed in: " + ALICE[0])
    run.check(True, "approved on the phone: Mail and Calendar show alice")
    # The sign-out opens the end-session page as every one does here (browserSignOut always);
    # its tab is closed once it came, so that the next part starts with the kiosk's browser as it was.
    known = run.kiosk.handles()
    mail.click("Sign Out")
    mail.wait_for_account("Nobody is signed in")
    calendar.wait_for_account("Nobody is signed in")
    run.kiosk.wait_for_tab(known, run.logout, 20, "the end-session page after the phone's sign-in")
    run.kiosk.close_tabs()


def idle_sign_out(run, mail, calendar):
    """Sign-out after inactivity with the X server's real idle time: the countdown in both windows,
    Mail's "Stay signed in" clicked with real X input, then the sign-out after keeping still."""
    # No desktop's screensaver runs on a bare Xvfb, so nothing on the bus tells brokerd the
    # person's idle time. screensaver_idle.py is the small adapter that serves it the way KDE's
    # screensaver does (GetSessionIdleTime), and its answers are the X server's own idle time
    # (MIT-SCREEN-SAVER), so only real input to this X server makes the person active. It must
    # own its name before brokerd starts: brokerd chooses its idle source at start.
    adapter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "screensaver_idle.py")
    run.start("screensaver-idle", ["/usr/bin/python3", adapter], ready="serving")
    config = run.path("idle.conf")
    with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        json.dump({"idleSignOutSeconds": IDLE_SIGN_OUT, "idleWarningSeconds": IDLE_WARNING}, out)
    run.broker.send_signal(signal.SIGTERM)
    run.broker.wait(timeout=15)
    run.start_broker(["--config", config])
    info = subprocess.run([os.path.join(run.args.broker_bin, "brokerctl"), "device-info"], env=run.env,
                          capture_output=True, text=True, timeout=30)
    run.check("org.freedesktop.ScreenSaver (GetSessionIdleTime at /org/freedesktop/ScreenSaver)" in info.stdout,
              "brokerd reads the person's idle time from the X server, through org.freedesktop.ScreenSaver",
              info.stdout + info.stderr)
    mail.wait_for_account("Nobody is signed in")
    calendar.wait_for_account("Nobody is signed in")

    # Carol signs in (the pointer moved first, as a person's hand does), then keeps still.
    x_input(run, "mousemove", "1050", "750")
    carol = "carol@contoso.example"
    mail.type("text", "Email", carol)
    mail.click("Send code")
    mail.find("text", "Code")
    mail.type("text", "Code", run.latest_code(carol))
    mail.click("Sign in with code")
    mail.wait_for_account("Signed in: " + carol)
    calendar.wait_for_account("Signed in: " + carol)
    signed_in = time.monotonic()

    def timed_countdown():
        before = time.time()
        shown = mail.countdown()
        return shown and (shown, before, time.time())

    first, before, after = wait_until(timed_countdown, IDLE_SIGN_OUT + 10, "the sign-out countdown in Mail", 0.1)
    print("# figure: the warning came %.1f s after the sign-in (%d s of quiet configured)"
          % (time.monotonic() - signed_in, IDLE_SIGN_OUT - IDLE_WARNING), flush=True)
    # Counted from the deadline: what the label showed while it was read lies between the seconds
    # left (rounded up) at the end of the read and at its start, one more for a tick not yet drawn.
    # brokerd rounds the deadline up to a whole second after the full warning, so the first figure
    # shown may be one more than the warning's length.
    deadline = sign_out_deadline(run) / 1e6
    lowest, highest = math.ceil(deadline - after), math.ceil(deadline - before) + 1
    run.check(0 < first <= IDLE_WARNING + 1 and lowest <= first <= highest,
              "Mail shows \"You will be signed out in %d s because of inactivity\", counted from brokerd's "
              "SignOutDeadline" % first, "%d s shown, %d to %d s expected" % (first, lowest, highest))
    run.check(bool(wait_quietly(lambda: (calendar.countdown() or 0) > 0, 5)), "Calendar shows the countdown too")

    def fallen():
        shown = mail.countdown()
        return shown if shown is not None and shown < first else None

    later = wait_until(fallen, 5, "the countdown to fall")
    run.check(later < first, "the countdown falls once a second (%d s, then %d s)" % (first, later))
    run.check(mail.find("push button", "Stay signed in", 5) is not None, "the banner offers \"Stay signed in\"")
    run.snap("10-sign-out-warning", [mail, calendar])

    # The click on "Stay signed in" is real input to the X server: the idle time falls, brokerd
    # hears it through GetSessionIdleTime and withdraws the warning.
    clicked = time.monotonic()
    print("# figure: the click came %.1f s before the deadline (%d s of warning configured)"
          % (deadline - time.time(), IDLE_WARNING), flush=True)
    mail.click_with_pointer("Stay signed in")
    # A toast shows for 5 s, and one added meanwhile waits its turn: 10 s.
    run.check(bool(wait_quietly(lambda: "Staying signed in" in mail.labels(), 10)),
              "the real click reached Mail's \"Stay signed in\" (its toast says so)")
    wait_until(lambda: mail.countdown() is None and calendar.countdown() is None, 10, "the banners to go")
    print("# figure: %.1f s from the click to both banners gone, as AT-SPI reads them"
          % (time.monotonic() - clicked), flush=True)
    run.check(True, "after the click brokerd withdrew the warning: the banner is gone in both windows")
    run.check(sign_out_deadline(run) == 0, "SignOutDeadline is back to 0")
    run.check("You are still signed in" in mail.log_text(), "Mail's log says the person is still signed in")
    run.check((mail.account_line() or "").startswith("Signed in: " + carol), "carol is still signed in")

    # Keep still again: the warning comes back after the quiet part, and at its deadline the
    # device is signed out; both windows say why.
    wait_until(mail.countdown, IDLE_SIGN_OUT + 10, "the second warning in Mail", 0.1)
    deadline = sign_out_deadline(run) / 1e6
    run.check(deadline > 0, "kept still, the warning came again")
    mail.wait_for_account("Nobody is signed in", timeout=IDLE_WARNING + 15)
    print("# figure: Mail showed the sign-in page %.1f s after the deadline, as AT-SPI reads it"
          % (time.time() - deadline), flush=True)
    calendar.wait_for_account("Nobody is signed in", timeout=10)
    run.check(True, "at the deadline the device was signed out: both windows show the sign-in page")
    for window in (mail, calendar):
        run.check(bool(wait_quietly(lambda: "Signed out after inactivity" in window.labels(), 5)),
                  "%s says it was signed out after inactivity" % window.app_name, str(window.labels()))
        run.check(window.countdown() is None, "%s shows no countdown after the sign-out" % window.app_name)
    run.snap("11-signed-out-after-inactivity", [mail, calendar])


def x_input(run, *arguments):
    """Real input to the X server (xdotool through XTEST), as a person's hand gives it."""
    subprocess.run(["xdotool", *arguments], env=run.env, check=True, timeout=10)


def sign_out_deadline(run):
    """brokerd's SignOutDeadline property (microseconds of the realtime clock; 0: no warning)."""
    reply = subprocess.run(
        ["gdbus", "call", "--session", "--dest", harness.BROKER_NAME, "--object-path", "/io/shareddevice/Broker1",
         "--method", "org.freedesktop.DBus.Properties.Get", harness.BROKER_NAME, "SignOutDeadline"],
        env=run.env, check=True, capture_output=True, text=True, timeout=10).stdout
    match = re.search(r"uint64 (\d+)", reply)
    if not match:
        raise Failure("SignOutDeadline read as %r" % reply)
    return int(match.group(1))


def page_screenshot(run, name):
    path = run.kiosk.screenshot(name)
    run.check(path is not None and os.path.getsize(path) > 1000, "screenshot %s of Chromium's page saved" % name)


def session_cookies(run):
    path = urllib.parse.urlparse(run.authority).path
    return [c for c in run.kiosk.cookies() if c.get("name") == "idpsim_session" and c.get("path", "").startswith(path)
            and c.get("value")]


def wait_quietly(predicate, timeout):
    try:
        return wait_until(predicate, timeout, "")
    except Failure:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window-bin", required=True)
    parser.add_argument("--broker-bin", required=True)
    parser.add_argument("--artifacts")
    args = parser.parse_args()
    run = Run(args)
    started = time.monotonic()
    try:
        scenario(run)
    except Exception as failure:  # a Failure (a wait ran out), or a broken step (Selenium, AT-SPI)
        detail = str(failure) if isinstance(failure, Failure) else "".join(
            traceback.format_exception(failure)[-2:]).strip()
        run.check(False, "the scenario ran to the end", detail)
        try:
            screenshot.save(run.env["DISPLAY"], os.path.join(run.artifacts, "failure-screen.png"))
        except Exception:
            pass
        try:
            run.kiosk.screenshot("failure-chromium")
        except Exception:
            pass
    finally:
        run.stop_all()
    print("# the window test took %.1f s" % (time.monotonic() - started), flush=True)
    print("# %d checks, %d failed; screenshots in %s" % (run.checks, run.failures, run.artifacts), flush=True)
    if run.failures:
        print("# logs in %s" % run.directory, flush=True)
    elif args.artifacts:
        shutil.rmtree(run.directory, ignore_errors=True)
    else:
        # The screenshots are in the run's directory: only the rest goes (the Chromium profile's megabytes).
        for name in os.listdir(run.directory):
            if name != "artifacts":
                if os.path.isdir(run.path(name)):
                    shutil.rmtree(run.path(name), ignore_errors=True)
                else:
                    os.remove(run.path(name))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
