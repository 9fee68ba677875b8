#!/usr/bin/python3
"""The tutorial window, tested as a person and a screen reader use it.

A headless X server (Xvfb), a private session bus with the accessibility bus, the real idp-sim and
brokerd, and two windows of tutorial-window acting as two apps ("Mail" and "Calendar"), driven
through AT-SPI (pyatspi): buttons are clicked with their accessible action, text is typed with
EditableText, and what the windows show is read from their accessible tree.

Usage: test_window.py --window-bin DIR --broker-bin DIR [--artifacts DIR]
  DIR of tutorial-window (with locale/ beside it), DIR of brokerd, idp-sim and brokerctl.
Prints one line per check (ok / not ok) and the figures; exit status 0 when every check passed.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import screenshot

USERS = {
    "users": [
        {"username": "carol@contoso.example", "displayName": "Carol Example", "email": "carol@contoso.example",
         "authMethods": ["emailOtp"]},
        {"username": "alice@contoso.example", "password": "alice-Passw0rd!", "displayName": "Alice Example",
         "email": "alice@contoso.example"},
    ],
    "clients": [{"clientId": c, "family": "1"} for c in ("mail-app", "calendar-app", "notes-app")],
}


class Failure(Exception):
    pass


class Run:
    """Every process of the test, stopped at the end in reverse order."""

    def __init__(self, args):
        self.args = args
        self.directory = tempfile.mkdtemp(prefix="tutorial-window-test-")
        self.artifacts = args.artifacts or os.path.join(self.directory, "artifacts")
        os.makedirs(self.artifacts, exist_ok=True)
        self.processes = []
        self.failures = 0
        self.checks = 0
        self.last_screen = None
        self.env = dict(os.environ)
        for key in ("DBUS_SESSION_BUS_ADDRESS", "WAYLAND_DISPLAY", "AT_SPI_BUS_ADDRESS", "NO_AT_BRIDGE", "GTK_A11Y"):
            self.env.pop(key, None)
        runtime = os.path.join(self.directory, "runtime")
        os.makedirs(runtime, mode=0o700)
        self.env.update({"XDG_RUNTIME_DIR": runtime, "GSETTINGS_BACKEND": "memory", "LANG": "C.UTF-8",
                         "LANGUAGE": "", "HOME": self.directory})

    # Processes

    def start(self, name, argv, env=None, ready=None, timeout=30):
        """Starts argv; with `ready`, waits (bounded) for a line of its standard output that starts so."""
        log = open(os.path.join(self.directory, name + ".log"), "w")
        process = subprocess.Popen(argv, env=env or self.env, stdout=subprocess.PIPE if ready else log,
                                   stderr=log, stdin=subprocess.DEVNULL, close_fds=True, text=True)
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

    def stop_all(self):
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()

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
        # A private bus with the standard session configuration: org.a11y.Bus (the accessibility
        # bus) is activatable on it, as on a desktop.
        _, address = self.start("dbus-daemon", ["dbus-daemon", "--session", "--nofork", "--print-address"],
                                ready="unix:")
        self.env["DBUS_SESSION_BUS_ADDRESS"] = address
        # This process reads the windows through AT-SPI on that bus and display, never the developer's.
        os.environ.clear()
        os.environ.update(self.env)

    def start_provider(self):
        users = os.path.join(self.directory, "users.json")
        with open(users, "w") as out:
            json.dump(USERS, out)
        binary = os.path.join(self.args.broker_bin, "idp-sim")
        _, line = self.start("idp-sim", [binary, "--port", "0", "--users", users], ready="listening on ")
        self.idp = line[len("listening on "):]
        # The users file names no tenant: idp-sim's default, a GUID.
        self.authority = self.idp + "/4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20/v2.0"

    def start_broker(self):
        binary = os.path.join(self.args.broker_bin, "brokerd")
        self.broker, _ = self.start(
            "brokerd", [binary, "--device-mode", "shared", "--authority", self.authority, "--state-dir",
                        os.path.join(self.directory, "state"), "--token-storage", "plaintext-file"],
            ready="brokerd ready:")

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

    def type(self, role, name, text):
        self.find(role, name).queryEditableText().setTextContents(text)

    def labels(self):
        return [n.name for n in self.nodes("label")]

    def account_line(self):
        return next((text for text in self.labels() if text.startswith("Signed in:") or text == "Nobody is signed in"),
                    None)

    def wait_for_account(self, expected, timeout=20):
        return wait_until(lambda: (self.account_line() or "").startswith(expected), timeout,
                          "%s to show %r (it shows %r)" % (self.app_name, expected, self.account_line()))

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
    mail.click("Sign in with code")
    problem = wait_until(lambda: next((t for t in mail.labels() if "code" in t.lower() and t != "Code"), None), 20,
                         "the wrong code to be explained")
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
    started = time.monotonic()
    calendar.click("Sign Out")
    mail.wait_for_account("Nobody is signed in", timeout=20)
    elapsed = (time.monotonic() - started) * 1000
    # An upper bound: each look at Mail walks its accessible tree over AT-SPI (tens of D-Bus calls).
    print("# figure: %.0f ms from the click on Sign Out in Calendar to Mail's sign-in page, as AT-SPI reads it"
          % elapsed, flush=True)
    run.check(True, "Sign Out in Calendar puts Mail on the sign-in page")
    run.check(not any(t.startswith("Name: ") for t in calendar.labels()), "the profile is cleared after sign-out")
    run.snap("5-signed-out", [mail, calendar])

    # The broker stops: the window says so and offers to retry; it recovers when the broker is back.
    run.broker.send_signal(signal.SIGTERM)
    run.broker.wait(timeout=15)
    mail.activate_action("refresh")
    mail.find("push button", "Retry")
    run.check(True, "with the broker stopped, Mail shows the retry state")
    run.snap("6-broker-stopped", [mail, calendar])
    run.start_broker()
    mail.click("Retry")
    mail.wait_for_account("Nobody is signed in")
    run.check(True, "Retry after the broker is back shows the sign-in page again")

    # Translations, read through the accessible tree.
    mail.close()
    calendar.close()
    for language, expected in (("es", ["Enviar código", "Iniciar sesión con contraseña", "Dispositivo compartido"]),
                               ("nl", ["Code versturen", "Aanmelden met wachtwoord", "Gedeeld apparaat"])):
        window = run.start_window("Notes", "notes-app", language=language)
        names = wait_until(lambda: set(n.name for n in window.nodes()) >= set(expected) and
                           set(n.name for n in window.nodes()), 20, "the %s labels" % language)
        run.check(set(expected) <= names, "LANGUAGE=%s shows translated labels" % language, str(expected))
        run.snap("7-%s" % language, [window])
        window.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window-bin", required=True)
    parser.add_argument("--broker-bin", required=True)
    parser.add_argument("--artifacts")
    args = parser.parse_args()
    run = Run(args)
    try:
        scenario(run)
    except Failure as failure:
        run.check(False, "the scenario ran to the end", str(failure))
        try:
            screenshot.save(run.env["DISPLAY"], os.path.join(run.artifacts, "failure-screen.png"))
        except Exception:
            pass
    finally:
        run.stop_all()
    print("# %d checks, %d failed; screenshots in %s" % (run.checks, run.failures, run.artifacts), flush=True)
    if run.failures:
        print("# logs in %s" % run.directory, flush=True)
    else:
        shutil.rmtree(run.directory, ignore_errors=True) if not args.artifacts else None
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
