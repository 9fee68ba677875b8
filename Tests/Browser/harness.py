"""The pieces of the browser suite: a private desktop (Xvfb, a private session bus with the real
desktop portal, a default browser configured as a kiosk configures it), the kiosk's Chromium driven
by Selenium, a second Chromium for "the phone", idp-sim, brokerd and brokerctl.

Nothing here touches the developer's own session bus, display, browser profile or configuration:
every process gets the environment built in `Run.__init__`.
"""
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

PORTAL = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
OPEN_URI = "org.freedesktop.portal.OpenURI"
BROKER_NAME = "io.shareddevice.Broker1"
# The desktop file the kiosk's mimeapps.list names as the default browser. A name of its own (not
# chromium.desktop), so that the portal launches it only because it is the default, which is what a
# kiosk's setup relies on: without the default the portal shows its "Open with" dialog (GLib knows
# the handlers of https from mimeinfo.cache files; where update-desktop-database wrote them,
# Debian's chromium.desktop is another one) and the page never reaches the browser.
DESKTOP_ID = "kiosk-browser.desktop"


class Failure(Exception):
    """The scenario cannot go on (a wait ran out, a process died)."""


def wait_until(predicate, timeout, what, interval=0.05):
    """Polls `predicate` until it returns something true; the deadline bounds the wait. Used where
    there is no line or signal to wait on (a browser tab, a page's content, a file)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as error:  # a tab may close or navigate between two queries
            value, last_error = None, error
        if value:
            return value
        time.sleep(interval)
    raise Failure("timed out after %g s waiting for %s%s" % (timeout, what,
                                                             " (last error: %s)" % last_error if last_error else ""))


class Lines:
    """A process's standard output, read by a thread: each line is kept (and copied to a log
    file), so a test can wait for one with a deadline instead of blocking on readline()."""

    def __init__(self, stream, log_path):
        self.fresh = queue.Queue()
        self.log = open(log_path, "w")
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            self.log.write(line)
            self.log.flush()
            self.fresh.put(line.rstrip("\n"))
        self.fresh.put(None)

    def wait_for(self, prefix, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("%s was not ready within %g s" % (what, timeout))
            try:
                line = self.fresh.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise Failure("%s ended before it was ready" % what)
            if line.startswith(prefix):
                return line


class Run:
    """The checks, the private environment, and every process, stopped at the end in reverse order."""

    def __init__(self, args):
        self.args = args
        self.directory = tempfile.mkdtemp(prefix="browser-test-")
        self.artifacts = os.path.abspath(args.artifacts) if args.artifacts else tempfile.mkdtemp(
            prefix="browser-artifacts-")
        os.makedirs(self.artifacts, exist_ok=True)
        self.processes = []
        self.checks = 0
        self.failures = 0
        self.counter = 0
        for name in ("runtime", "home", "config", "data/applications", "services", "tripwire", "profiles"):
            os.makedirs(self.path(name), exist_ok=True)
        os.chmod(self.path("runtime"), 0o700)
        env = dict(os.environ)
        # Nothing of the developer's session: not their bus, display, browser or desktop.
        for key in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "AT_SPI_BUS_ADDRESS",
                    "XDG_SESSION_TYPE", "XDG_SESSION_DESKTOP", "DESKTOP_SESSION", "GNOME_DESKTOP_SESSION_ID",
                    "INVOCATION_ID", "JOURNAL_STREAM", "XDG_CONFIG_DIRS", "XDG_STATE_HOME", "XDG_CACHE_HOME",
                    "GTK_A11Y", "GIO_LAUNCHED_DESKTOP_FILE"):
            env.pop(key, None)
        env.update({
            "XDG_RUNTIME_DIR": self.path("runtime"),
            "HOME": self.path("home"),
            "XDG_DATA_HOME": self.path("home/.local/share"),
            # No accessibility bus here (test_window.py tests that); GTK would only warn about it.
            "NO_AT_BRIDGE": "1",
            "LANG": "C.UTF-8",
            "LANGUAGE": "",
        })
        env.update(desktop_environment(self.directory))
        self.env = env

    def path(self, *parts):
        return os.path.join(self.directory, *parts)

    # Processes

    def start(self, name, argv, env=None, ready=None, timeout=30, stdin=False):
        """Starts argv, its standard error in NAME.log; with `ready`, waits (bounded) for a line of
        its standard output that starts so, and returns it (process.lines has the lines after it);
        with `stdin`, process.stdin is a pipe."""
        self.counter += 1
        log_name = name if not os.path.exists(self.path(name + ".log")) else "%s-%d" % (name, self.counter)
        err = open(self.path(log_name + ".log"), "w")
        process = subprocess.Popen(argv, env=env or self.env, stdout=subprocess.PIPE if ready else err, stderr=err,
                                   stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, close_fds=True, text=True)
        self.processes.append((name, process))
        line = None
        if ready:
            process.lines = Lines(process.stdout, self.path(log_name + ".out"))
            line = process.lines.wait_for(ready, timeout, name)
        process.log_path = self.path(log_name + ".log")
        return process, line

    def stop(self, process, timeout=10):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        self.processes = [(n, p) for (n, p) in self.processes if p is not process]

    def add(self, name, process):
        """Something to stop with the processes, in reverse order of start (poll, terminate, wait, kill)."""
        self.processes.append((name, process))

    def stop_all(self):
        for _, process in reversed(list(self.processes)):
            try:
                self.stop(process)
            except Exception:
                pass

    # Checks

    def check(self, condition, what, details=""):
        self.checks += 1
        condition = bool(condition)
        if condition:
            print("ok %d - %s" % (self.checks, what), flush=True)
        else:
            self.failures += 1
            details = str(details)
            if len(details) > 600:
                details = details[:600] + " ..."
            print("not ok %d - %s%s" % (self.checks, what, (": " + details) if details else ""), flush=True)
        return condition

    def note(self, text):
        print("# " + text, flush=True)


# The pieces of the private desktop, for a test that starts its own display and bus (the GTK
# window's test, examples/TutorialWindow/tests/test_window.py, whose bus also has the
# accessibility bus): its environment, its default browser, the portal's activation files and the
# bus configuration that makes them activatable.

PORTAL_SERVICES = {
    "org.freedesktop.portal.Desktop": "/usr/libexec/xdg-desktop-portal",
    "org.freedesktop.impl.portal.desktop.gtk": "/usr/libexec/xdg-desktop-portal-gtk",
    "org.freedesktop.impl.portal.PermissionStore": "/usr/libexec/xdg-permission-store",
}


def desktop_environment(root):
    """The variables of the kiosk's desktop under the directory `root` (its `config` and `data`
    subdirectories, which write_default_browser fills), for every process of the private desktop."""
    return {
        # The kiosk's default browser: mimeapps.list here names DESKTOP_ID, found in
        # XDG_DATA_DIRS' first entry; /usr/share stays for the portal's and GTK's own files.
        "XDG_CONFIG_HOME": os.path.join(root, "config"),
        "XDG_DATA_DIRS": os.path.join(root, "data") + ":/usr/local/share:/usr/share",
        # gtk.portal says UseIn=gnome: the portal then takes its backends from
        # xdg-desktop-portal-gtk by name rather than as a fallback.
        "XDG_CURRENT_DESKTOP": "GNOME",
        "GSETTINGS_BACKEND": "memory",
    }


def write_default_browser(root, profile):
    """Makes DESKTOP_ID, a Chromium with `profile`, the default browser of desktop_environment(root)."""
    # The command a desktop runs for a link: Chromium's launcher with the kiosk's profile. When
    # that profile's browser is running (the Selenium-driven one), Chromium's process singleton
    # hands the URL to it as a new tab and the launched process exits, as on a real desktop.
    # As root Chromium refuses to start without --no-sandbox, even just to hand a URL on; a
    # kiosk's user is not root, so the flag is added only here.
    applications = os.path.join(root, "data", "applications")
    config = os.path.join(root, "config")
    os.makedirs(applications, exist_ok=True)
    os.makedirs(config, exist_ok=True)
    sandbox = " --no-sandbox" if os.geteuid() == 0 else ""
    with open(os.path.join(applications, DESKTOP_ID), "w") as out:
        out.write("[Desktop Entry]\nType=Application\nVersion=1.0\nName=Kiosk browser (Chromium)\n"
                  "Exec=chromium --user-data-dir=%s%s %%U\nTerminal=false\n"
                  "MimeType=x-scheme-handler/http;x-scheme-handler/https;text/html;\n"
                  "Categories=Network;WebBrowser;\n" % (profile, sandbox))
    with open(os.path.join(config, "mimeapps.list"), "w") as out:
        out.write("[Default Applications]\n")
        for kind in ("x-scheme-handler/http", "x-scheme-handler/https", "text/html"):
            out.write("%s=%s\n" % (kind, DESKTOP_ID))


def write_portal_services(directory, extra=None):
    """Activation files in `directory` for the real portal, its GTK backend and the permission
    store, and for `extra` ({bus name: executable}), started by the bus with its environment."""
    os.makedirs(directory, exist_ok=True)
    for name, executable in dict(PORTAL_SERVICES, **(extra or {})).items():
        with open(os.path.join(directory, name + ".service"), "w") as out:
            out.write("[D-BUS Service]\nName=%s\nExec=%s\n" % (name, executable))


def write_bus_config(path, listen_directory, service_directory):
    """A session bus configuration at `path` listening in `listen_directory`, whose only activatable
    services are those of `service_directory`; returns `path`."""
    with open(path, "w") as out:
        out.write("""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>unix:dir=%s</listen>
  <auth>EXTERNAL</auth>
  <servicedir>%s</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
""" % (listen_directory, service_directory))
    return path


class PrivateDesktop:
    """Xvfb, a private session bus whose only activatable services are the real portal, its GTK
    backend and the permission store, and the default browser set as a kiosk sets it."""

    def __init__(self, run):
        self.run = run

    def start(self, browser_profile):
        self._start_display()
        self._write_default_browser(browser_profile)
        self._start_bus()

    def _start_display(self):
        for number in range(90, 190):
            if not os.path.exists("/tmp/.X11-unix/X%d" % number) and not os.path.exists("/tmp/.X%d-lock" % number):
                break
        display = ":%d" % number
        self.run.start("xvfb", ["Xvfb", display, "-screen", "0", "1280x900x24", "-nolisten", "tcp"])
        socket = "/tmp/.X11-unix/X%d" % number
        wait_until(lambda: os.path.exists(socket), 20, "the X server's socket")
        self.run.env["DISPLAY"] = display

    def _write_default_browser(self, profile):
        write_default_browser(self.run.directory, profile)

    def _start_bus(self):
        run = self.run
        # Activation files of our own: the portal and what it needs, started by this bus with its
        # environment (the display, XDG_CURRENT_DESKTOP, the private XDG directories), and nothing
        # else from the machine's service directories.
        write_portal_services(run.path("services"))
        config = write_bus_config(run.path("bus.conf"), run.path("runtime"), run.path("services"))
        _, address = run.start("dbus-daemon", ["dbus-daemon", "--config-file", config, "--nofork", "--print-address"],
                               ready="unix:")
        run.env["DBUS_SESSION_BUS_ADDRESS"] = address
        # Selenium's Chromium and this process's bus calls use that bus and display, never the developer's.
        os.environ.clear()
        os.environ.update(run.env)
        self.address = address

    @classmethod
    def on_bus(cls, run, address):
        """The portal's calls (start_portal, name_owner) on a bus another test started itself, with
        write_portal_services and write_bus_config."""
        desktop = cls(run)
        desktop.address = address
        return desktop

    def bus(self):
        """This process's connection to the private bus (python3-dbus, blocking calls only)."""
        if getattr(self, "connection", None) is None:
            import dbus
            self.connection = dbus.bus.BusConnection(self.address)
        return self.connection

    def start_portal(self, timeout=30):
        """Starts the portal by activation (as the first caller would) and returns the version of
        its OpenURI interface, or raises Failure."""
        import dbus
        connection = self.bus()
        connection.call_blocking("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                 "StartServiceByName", "su", (PORTAL, 0), timeout=timeout)
        portal = connection.get_object(PORTAL, PORTAL_PATH)
        try:
            return int(portal.Get(OPEN_URI, "version", dbus_interface="org.freedesktop.DBus.Properties",
                                  timeout=timeout))
        except dbus.DBusException as error:
            raise Failure("the portal serves no %s: %s" % (OPEN_URI, error))

    def name_owner(self, name):
        return str(self.bus().call_blocking("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                            "GetNameOwner", "s", (name,)))


class BusMonitor:
    """dbus-monitor on the private bus, watching OpenURI calls and the portal's Response signals."""

    def __init__(self, run, address):
        self.run = run
        process, _ = run.start("dbus-monitor", [
            "dbus-monitor", "--address", address,
            "type='method_call',interface='%s'" % OPEN_URI,
            "type='signal',interface='org.freedesktop.portal.Request',member='Response'"])
        self.process = process
        self.log = process.log_path
        # dbus-monitor prints NameLost for its own name once it has become a monitor.
        wait_until(lambda: "member=NameLost" in open(self.log).read(), 20, "dbus-monitor to become a monitor")

    def messages(self):
        """[(header, [argument lines])] of everything seen so far."""
        messages = []
        for line in open(self.log).read().splitlines():
            if line.startswith(("method call", "signal", "method return", "error")):
                messages.append((line, []))
            elif messages:
                messages[-1][1].append(line.strip())
        return messages

    def open_uri_calls(self):
        """[(sender, url, handle_token)] of every OpenURI call."""
        calls = []
        for header, arguments in self.messages():
            if header.startswith("method call") and "member=OpenURI" in header:
                sender = header.split("sender=")[1].split()[0]
                strings = [m.group(1) for a in arguments for m in [re.search(r'string "(.*)"$', a)] if m]
                token = strings[strings.index("handle_token") + 1] if "handle_token" in strings else None
                # Arguments: parent window, URI, options.
                calls.append((sender, strings[1] if len(strings) > 1 else None, token))
        return calls

    def handle_token_lines(self):
        """How the handle_token option looked on the bus (dbus-monitor's rendering of its value)."""
        return [line for _, arguments in self.messages() for line in arguments if "shared_device_broker_" in line]

    def responses(self):
        """[(destination, request object path, response code)] of the portal's Response signals."""
        found = []
        for header, arguments in self.messages():
            if header.startswith("signal") and "member=Response" in header:
                destination = header.split("destination=")[1].split()[0]
                path = header.split("path=")[1].split(";")[0]
                code = next((int(a.split()[1]) for a in arguments if a.startswith("uint32 ")), None)
                found.append((destination, path, code))
        return found


class Browser:
    """A Chromium driven by chromedriver through Selenium: the kiosk's (non-headless, under Xvfb,
    the desktop's default browser) or the phone's (headless, a profile of its own)."""

    def __init__(self, run, name, profile, headless=False):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        self.run = run
        self.name = name
        self.profile = profile
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for argument in ("--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
                         "--password-store=basic", "--window-size=1100,800", "--disable-search-engine-choice-screen",
                         "--disable-features=Translate,MediaRouter"):
            options.add_argument(argument)
        if os.geteuid() == 0:
            options.add_argument("--no-sandbox")
        if headless:
            options.add_argument("--headless=new")
        # chromedriver starts Chromium with --enable-automation, and a browser started so does not
        # take URLs from other Chromium processes of its profile: the launcher the portal runs then
        # fails ("Failed to create a ProcessSingleton for your profile directory ... Aborting") and
        # the page never shows. Without the switch (only the "controlled by automated software"
        # bar goes with it) the singleton hands the URL over, as on a desktop. Checked with
        # Chromium 156; if a later one stops honouring it, open pages with the DevTools protocol
        # of the running browser (Target.createTarget) from a small opener the .desktop file runs.
        options.add_experimental_option("excludeSwitches", ["enable-automation"])
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(shutil.which("chromedriver") or "/usr/bin/chromedriver",
                          log_path=run.path("chromedriver-%s.log" % name))
        self.driver = webdriver.Chrome(service=service, options=options)
        self.closed = False
        run.add("chromium-" + name, self)
        self.driver.set_page_load_timeout(30)
        self.home = self.driver.current_window_handle
        self.version = self.driver.capabilities.get("browserVersion", "?")
        self.console = []

    # Stopped with the processes (Run.stop): quitting ends chromedriver and its Chromium.

    def poll(self):
        return 0 if self.closed else None

    def terminate(self):
        self.closed = True
        try:
            self.driver.quit()
        except Exception:
            pass

    def wait(self, timeout=None):
        return 0

    kill = terminate

    # Tabs

    def handles(self):
        return set(self.driver.window_handles)

    def wait_for_tab(self, known, prefix, timeout, what):
        """A tab not in `known` whose address starts with `prefix`; switches to it."""

        def find():
            for handle in self.driver.window_handles:
                if handle in known:
                    continue
                self.driver.switch_to.window(handle)
                if self.driver.current_url.startswith(prefix):
                    return handle
            return None

        return wait_until(find, timeout, what, interval=0.1)

    def switch(self, handle):
        self.driver.switch_to.window(handle)

    def close_tabs(self, keep=None):
        """Closes every tab but the first (closing the last one would end the browser)."""
        for handle in self.driver.window_handles:
            if handle != self.home and handle != keep:
                self.driver.switch_to.window(handle)
                self.driver.close()
        self.driver.switch_to.window(self.home)

    def url(self):
        return self.driver.current_url

    def loaded(self):
        return self.driver.execute_script("return document.readyState") == "complete"

    def text(self):
        return self.driver.execute_script("return document.body ? document.body.innerText : ''")

    def field(self, name):
        from selenium.webdriver.common.by import By
        found = self.driver.find_elements(By.NAME, name)
        return found[0] if found else None

    def login_form(self):
        """Whether the current tab shows idp-sim's sign-in form."""
        return self.loaded() and self.field("username") is not None and self.field("password") is not None

    def fill(self, values, button="button[type=submit]"):
        from selenium.webdriver.common.by import By
        for name, value in values:
            element = self.field(name)
            element.clear()
            element.send_keys(value)
        self.driver.find_element(By.CSS_SELECTOR, button).click()

    def new_tab(self, url):
        self.driver.switch_to.new_window("tab")
        self.driver.get(url)
        return self.driver.current_window_handle

    # Evidence

    def screenshot(self, name):
        path = os.path.join(self.run.artifacts, name + ".png")
        ok = self.driver.get_screenshot_as_file(path)
        return path if ok and os.path.getsize(path) > 0 else None

    def drain_console(self):
        entries = self.driver.get_log("browser")
        self.console.extend(entries)
        return entries

    def severe_from(self, origin):
        """SEVERE console entries about `origin` since the last drain. The browser's own request
        for /favicon.ico, which idp-sim answers 404, is not the page's doing and is left out."""
        return [entry for entry in self.drain_console()
                if entry.get("level") == "SEVERE" and origin + "/" in entry.get("message", "")
                and not (entry.get("source") == "network" and origin + "/favicon.ico" in entry.get("message", ""))]

    def cookies(self):
        """Every cookie of the profile (HttpOnly ones too), through the DevTools protocol."""
        return self.driver.execute_cdp_cmd("Network.getAllCookies", {}).get("cookies", [])


class Provider:
    """An idp-sim process."""

    def __init__(self, run, name, users_file, extra=()):
        binary = os.path.join(run.args.broker_bin, "idp-sim")
        self.process, line = run.start(name, [binary, "--port", "0", "--users", users_file] + list(extra),
                                       ready="listening on ")
        self.base = line[len("listening on "):]
        self.origin = self.base
        self.name = name

    def use_authority(self, path):
        self.authority = self.base + path
        with urllib.request.urlopen(self.authority + "/.well-known/openid-configuration", timeout=10) as response:
            self.metadata = json.load(response)
        self.authorize = self.metadata["authorization_endpoint"]
        self.logout = self.metadata.get("end_session_endpoint")
        return self

    def age_sessions(self, seconds):
        """Moves every browser session's authentication back (idp-sim's test route): the last
        person typed their password at the start of their shift, not a second ago."""
        request = urllib.request.Request(self.base + "/test/age-sessions?seconds=%d" % seconds, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response).get("agedSessions", 0)

    def browser_requests(self):
        """["/path?query"] of the browser's requests to the authorization and end-session endpoints
        (idp-sim's test route), oldest first: brokerd hands the browser only a one-time local
        address, which redirects there."""
        with urllib.request.urlopen(self.base + "/test/browser-requests", timeout=10) as response:
            return json.load(response)

    def probe_url(self):
        """An authorization request without prompt, to a loopback address nobody listens on: with a
        browser session idp-sim redirects there at once, without one it shows its sign-in form."""
        query = urllib.parse.urlencode({
            "client_id": "mail-app", "response_type": "code", "redirect_uri": "http://127.0.0.1:9/probe",
            "scope": "openid", "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "code_challenge_method": "S256", "state": "probe"})
        return self.authorize + "?" + query


class Broker:
    """A brokerd process in shared mode, with what the suite checks about how it opened pages."""

    def __init__(self, run, desktop, provider, state, config=None, timeout=None, label="brokerd"):
        self.run = run
        self.config = config
        env = dict(run.env)
        env.pop("BROWSER", None)
        # A tripwire, not a fallback: were brokerd to fall back to xdg-open, this one would record
        # the call and fail, and the suite says so.
        env["PATH"] = run.path("tripwire") + ":" + env.get("PATH", "/usr/bin:/bin")
        argv = [os.path.join(run.args.broker_bin, "brokerd"), "--device-mode", "shared", "--authority",
                provider.authority, "--state-dir", state, "--token-storage", "plaintext-file", "--log-level", "debug"]
        if config is not None:
            path = run.path("%s.json" % label)
            with open(path, "w") as out:
                json.dump(config, out)
            argv += ["--config", path]
        if timeout is not None:
            argv += ["--interactive-timeout", str(timeout)]
        self.process, self.ready = run.start(label, argv, env=env, ready="brokerd ready:")
        self.unique_name = desktop.name_owner(BROKER_NAME)
        self.provider = provider
        with open("/proc/%d/environ" % self.process.pid, "rb") as environ:
            self.environment = dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)

    def log(self):
        with open(self.process.log_path, errors="replace") as log:
            return log.read()

    def stop(self):
        self.run.stop(self.process, timeout=15)


def install_tripwire(run):
    marker = run.path("xdg-open-was-called")
    script = run.path("tripwire", "xdg-open")
    with open(script, "w") as out:
        out.write("#!/bin/sh\necho \"$@\" >> %s\nexit 1\n" % marker)
    os.chmod(script, 0o755)
    return marker


class Brokerctl:
    """brokerctl (built on the SharedDeviceClient library) as the apps use it."""

    def __init__(self, run):
        self.run = run
        self.binary = os.path.join(run.args.broker_bin, "brokerctl")

    def call(self, arguments, timeout=30):
        return subprocess.run([self.binary] + arguments, env=self.run.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def current(self, client_id):
        """The username of the device's current account as `client_id` sees it, or None."""
        result = self.call(["current-account", "--client-id", client_id, "--json"])
        if result.returncode != 0:
            raise Failure("brokerctl current-account failed: %s" % result.stderr.strip())
        current = json.loads(result.stdout).get("current")
        return current.get("username") if current else None

    def start(self, arguments, name):
        """A long call (a sign-in) in the background; its output in files."""
        self.run.counter += 1
        base = self.run.path("brokerctl-%d-%s" % (self.run.counter, name))
        out, err = open(base + ".out", "w"), open(base + ".err", "w")
        process = subprocess.Popen([self.binary] + arguments, env=self.run.env, stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL, text=True)
        process.out_path, process.err_path = base + ".out", base + ".err"
        process.started = time.monotonic()
        self.run.processes.append(("brokerctl " + name, process))
        return process

    def finish(self, process, timeout):
        """Waits (bounded) for a background call; returns (exit status, stdout, stderr)."""
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.run.stop(process)
            raise Failure("brokerctl did not finish within %g s" % timeout)
        self.run.processes = [(n, p) for (n, p) in self.run.processes if p is not process]
        return process.returncode, open(process.out_path).read(), open(process.err_path).read()

    @staticmethod
    def err(process):
        return open(process.err_path).read()
