"""Debian's glewlwyd on loopback, set up as an administrator would: a private sqlite database made
from the package's own init script, a configuration file beside it (nothing in /etc or /var), the
server started on 127.0.0.1 and stopped by its pid, then configured through its admin API with the
package's default administrator: an OpenID Connect plugin instance signing RS256 with a key made
here, with CIBA in poll mode (no e-mail), users (alice, bob) and a public client. glewlwyd serves
its own web pages (the login and end-session pages a browser is sent to) from a copy of the
package's.

Run on its own (`python3 Tests/Providers/glewlwyd.py`) it starts, configures, prints the authority
and waits for Ctrl-C; test_providers.py uses `Glewlwyd` as a context manager.
"""
import gzip
import http.cookiejar
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

BINARY = "/usr/bin/glewlwyd"
INIT_SQL = "/usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz"
PACKAGE_CONF = "/etc/glewlwyd/glewlwyd.conf"
MODULES = "/usr/lib/glewlwyd"
# The package's web pages (the login page is a JavaScript app reading its config.json beside it).
WEBAPP = "/usr/share/glewlwyd/webapp"
# The init script's administrator (docs/GETTING_STARTED.md: change it after the first login).
ADMIN = ("admin", "password")
PLUGIN = "oidc"
CIBA_GRANT = "urn:openid:params:grant-type:ciba"


class GlewlwydError(Exception):
    """glewlwyd could not be started or configured; the message says which step and its answer."""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Session:
    """An HTTP client with its own cookie jar: one browser, one person's glewlwyd session."""

    def __init__(self, base):
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
                                                  NoRedirect())

    def call(self, method, path, body=None, expect=(200,)):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with self.opener.open(request, timeout=15) as response:
                status, headers, text = response.status, response.headers, response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read().decode(errors="replace")
        if status not in expect:
            raise GlewlwydError("%s %s answered %d: %s" % (method, path, status, text[:300]))
        return status, headers, text

    def sign_in(self, username, password):
        """What glewlwyd's login page does with a username and password."""
        self.call("POST", "/api/auth/", {"username": username, "password": password})


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """The device page answers with a redirect to the login app; the test reads where, not follows."""

    def redirect_request(self, *args, **kwargs):
        return None


class Glewlwyd:
    def __init__(self, directory=None, client_id="mail-app", redirect_ports=range(53100, 53110),
                 users=(("alice", "alice-password-1"), ("bob", "bob-password-1"))):
        self.directory = directory or tempfile.mkdtemp(prefix="glewlwyd-")
        self.own_directory = directory is None
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.authority = self.base + "/api/" + PLUGIN
        self.client_id = client_id
        self.redirect_ports = redirect_ports
        self.users = users
        self.process = None

    def __enter__(self):
        try:
            self.start()
            self.configure()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def path(self, name):
        return os.path.join(self.directory, name)

    def start(self):
        if not os.access(BINARY, os.X_OK):
            raise GlewlwydError("%s is missing: `apt-get install glewlwyd` (make test-providers does)" % BINARY)
        with gzip.open(INIT_SQL, "rt") as script, sqlite3.connect(self.path("glewlwyd.db")) as db:
            db.executescript(script.read())
        self.write_webapp()
        self.write_config()
        self.log = open(self.path("glewlwyd.log"), "w")
        self.launch()

    def launch(self):
        """The server on the configuration and database already made, until it listens (bounded)."""
        self.process = subprocess.Popen([BINARY, "--config-file=" + self.path("glewlwyd.conf")], stdout=self.log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, close_fds=True)
        with open(self.path("glewlwyd.pid"), "w") as out:
            out.write("%d\n" % self.process.pid)
        deadline = time.monotonic() + 20
        while True:
            if self.process.poll() is not None:
                raise GlewlwydError("glewlwyd exited (%s) at start; its log: %s" % (self.process.returncode,
                                                                                    self.log_tail()))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise GlewlwydError("glewlwyd did not listen on port %d within 20 s" % self.port)
                time.sleep(0.05)

    def write_config(self):
        """The package's configuration with what makes it private: the port, the addresses it
        names in its answers, the database and the log."""
        with open(PACKAGE_CONF) as source:
            lines = source.read().splitlines()
        replaced = {
            "port": "%d" % self.port,
            "bind_address": '"127.0.0.1"',
            "external_url": '"%s"' % self.base,
            "log_mode": '"file"',
            "log_file": '"%s"' % self.path("glewlwyd-server.log"),
            "log_level": '"DEBUG"',
            # The login and end-session pages, served by glewlwyd itself at its root (the package
            # leaves that to a web server in front, glewlwyd-apache.conf; the pages find the API
            # relative to themselves, so either way works).
            "static_files_path": '"%s/"' % self.path("webapp"),
        }
        out, seen = [], set()
        for line in lines:
            key = line.split("=", 1)[0].strip()
            if line.lstrip().startswith("@include"):
                continue
            if key in replaced and "=" in line and not line.lstrip().startswith("#"):
                out.append("%s=%s" % (key, replaced[key]))
                seen.add(key)
            else:
                out.append(line)
        out += ["%s=%s" % (key, value) for key, value in replaced.items() if key not in seen]
        out += ['database =', '{', '  type = "sqlite3"', '  path = "%s"' % self.path("glewlwyd.db"), '};']
        with open(self.path("glewlwyd.conf"), "w") as conf:
            conf.write("\n".join(out) + "\n")

    def write_webapp(self):
        """The package's web pages as an administrator serves them, with the config.json the login
        page reads. Copied, links resolved: glewlwyd serves no file whose real path is outside
        static_files_path. Debian's glewlwyd-common ships that file as
        /etc/glewlwyd/config-2.7.json/config.json, a directory where webapp/config.json's link
        expects the file, so the pages as packaged get a 404 for it and never show their form; the
        administrator puts the file itself there, as here."""
        webapp = self.path("webapp")
        shutil.copytree(WEBAPP, webapp, ignore=shutil.ignore_patterns("config.json"))
        packaged = os.path.realpath(os.path.join(WEBAPP, "config.json"))
        if os.path.isdir(packaged):
            packaged = os.path.join(packaged, "config.json")
        shutil.copy(packaged, os.path.join(webapp, "config.json"))

    def log_tail(self):
        for name in ("glewlwyd-server.log", "glewlwyd.log"):
            try:
                with open(self.path(name), errors="replace") as log:
                    text = log.read()
                if text:
                    return text[-2000:]
            except OSError:
                pass
        return "(empty)"

    def rsa_key(self):
        key = self.path("oidc-key.pem")
        cert = self.path("oidc-pub.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key],
                       check=True, capture_output=True, timeout=60)
        subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", cert], check=True, capture_output=True,
                       timeout=30)
        with open(key) as k, open(cert) as c:
            return k.read(), c.read()

    def configure(self):
        admin = Session(self.base)
        admin.sign_in(*ADMIN)
        key, cert = self.rsa_key()
        admin.call("POST", "/api/mod/plugin/", {
            "module": "oidc", "name": PLUGIN, "display_name": "OpenID Connect", "enabled": True,
            "parameters": {
                "iss": self.authority, "jwt-type": "rsa", "jwt-key-size": "256", "key": key, "cert": cert,
                "access-token-duration": 3600, "refresh-token-duration": 1209600, "code-duration": 600,
                "refresh-token-rolling": True, "allow-non-oidc": False,
                "auth-type-code-enabled": True, "auth-type-token-enabled": False,
                "auth-type-id-token-enabled": True, "auth-type-none-enabled": False,
                "auth-type-password-enabled": False, "auth-type-client-enabled": False,
                "auth-type-refresh-enabled": True, "auth-type-device-enabled": True,
                "device-authorization-expiration": 600, "device-authorization-interval": 1,
                "pkce-allowed": True, "pkce-method-plain-allowed": False,
                "introspection-revocation-allowed": True, "introspection-revocation-allow-target-client": True,
                "session-management-allowed": True, "session-cookie-name": "GLEWLWYD_OIDC_SESSION",
                "session-cookie-expiration": 2419200, "scope": [],
                # Without it the end-session page cannot be confirmed: the session's clients it
                # asks for first are answered 400, and its Logout button then does nothing.
                "front-channel-logout-allowed": True,
                # glewlwyd's sub is a random string: the sign-in name, the display name and the
                # e-mail address are claims the administrator adds to every ID token.
                "name-claim": "mandatory", "email-claim": "mandatory",
                "claims": [{"name": "preferred_username", "user-property": "username", "type": "string",
                            "mandatory": True, "on-demand": False, "scope": []}],
                # CIBA in poll mode alone (ping and push need an address glewlwyd can reach, which a
                # kiosk has not); a person's requests are listed in their glewlwyd session
                # (ciba_user_list), which stands for the phone here, not e-mailed to them.
                "oauth-ciba-allowed": True, "oauth-ciba-mode-poll-allowed": True,
                "oauth-ciba-mode-ping-allowed": False, "oauth-ciba-mode-push-allowed": False,
                "oauth-ciba-default-expiry": 600, "oauth-ciba-maximum-expiry": 600,
                "oauth-ciba-user-code-allowed": False, "oauth-ciba-email-allowed": False,
            }})
        for username, password in self.users:
            admin.call("POST", "/api/user/", {"username": username, "name": username.title(), "email": "",
                                              "enabled": True, "password": password, "scope": ["openid"]})
        admin.call("POST", "/api/client/", {
            "client_id": self.client_id, "name": "Mail", "confidential": False, "enabled": True,
            "redirect_uri": ["http://127.0.0.1:%d/" % port for port in self.redirect_ports],
            # CIBA's grant by its URN (glewlwyd's check_client_valid), and the poll delivery: its
            # token endpoint answers a CIBA client of no delivery mode unauthorized_client.
            "authorization_type": ["code", "refresh_token", "device_authorization", CIBA_GRANT],
            "backchannel_token_delivery_mode": "poll",
            "scope": ["openid"]})
        with urllib.request.urlopen(self.authority + "/.well-known/openid-configuration", timeout=10) as response:
            self.metadata = json.load(response)

    def approve_device_code(self, user_code, username, password, scope="openid"):
        """What a person does on the verification page: signs in with a password, consents to the
        client's scope and enters the code. Returns where glewlwyd sends the browser after."""
        person = Session(self.base)
        person.sign_in(username, password)
        person.call("PUT", "/api/auth/grant/" + urllib.parse.quote(self.client_id), {"scope": scope})
        page = "/api/%s/device?code=%s&g_continue" % (PLUGIN, urllib.parse.quote(user_code))
        _, headers, _ = person.call("GET", page, expect=(302,))
        return headers.get("Location", "")

    def crash(self):
        """An outage: the server killed (SIGKILL), its database and configuration left as they are."""
        self.process.kill()
        self.process.wait(timeout=10)

    def restart(self):
        """The server again, on the same port, configuration and database (what it kept survives)."""
        self.launch()

    def logged(self, needle):
        """How many lines of glewlwyd's log hold `needle` (an event it logs: a grant, a token)."""
        try:
            with open(self.path("glewlwyd-server.log"), errors="replace") as log:
                return sum(needle in line for line in log)
        except OSError:
            return 0

    def session_users(self, session_id):
        """The usernames glewlwyd's login session `session_id` (a GLEWLWYD2_SESSION_ID cookie's value,
        the package's session_key) holds, as its profile API answers a browser presenting it; []
        once that session is ended."""
        request = urllib.request.Request(self.base + "/api/profile_list",
                                         headers={"Cookie": "GLEWLWYD2_SESSION_ID=" + session_id})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return [user.get("username") for user in json.load(response)]
        except urllib.error.HTTPError as error:
            if error.code == 401:
                return []
            raise GlewlwydError("GET /api/profile_list answered %d: %s" % (error.code, error.read()[:300]))

    def phone(self, username, password):
        """The person's phone: a glewlwyd session of theirs (its login API, with their password), with
        their consent to the client's scope, as glewlwyd's login page does before it approves."""
        return Phone(self, username, password)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.own_directory and os.environ.get("KEEP_GLEWLWYD") != "1":
            shutil.rmtree(self.directory, ignore_errors=True)


class Phone:
    """What a person's authenticator does with glewlwyd's CIBA: the requests waiting for them
    (`GET /api/PLUGIN/ciba_user_list`, each with its binding message and its connect and cancel
    addresses), approved (`ciba_user_check?user_req_id=ID&g_continue`) or denied (`...&cancel`), as
    glewlwyd's login page does; each answers with a redirect to that page, whose `ciba_message`
    says how it went."""

    def __init__(self, server, username, password, scope="openid"):
        self.server = server
        self.session = Session(server.base)
        self.session.sign_in(username, password)
        self.session.call("PUT", "/api/auth/grant/" + urllib.parse.quote(server.client_id), {"scope": scope})

    def requests(self):
        _, _, text = self.session.call("GET", "/api/%s/ciba_user_list" % PLUGIN)
        return json.loads(text)

    def waiting(self, binding_message, timeout=15):
        """The request showing `binding_message`, once glewlwyd lists it (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            listed = self.requests()
            for request in listed:
                if request.get("binding_message") == binding_message:
                    return request
            if time.monotonic() > deadline:
                raise GlewlwydError("no CIBA request with binding message %r within %d s; listed: %s"
                                    % (binding_message, timeout, listed))
            time.sleep(0.2)

    def answer(self, request, approve):
        """Approves or denies `request`; returns glewlwyd's ciba_message (complete, cancelled, ...)."""
        path = "/api/%s/ciba_user_check?user_req_id=%s" % (PLUGIN, urllib.parse.quote(request["user_req_id"]))
        _, headers, _ = self.session.call("GET", path + ("&g_continue" if approve else "&cancel"), expect=(302,))
        location = headers.get("Location", "")
        found = re.search(r"[?&#]ciba_message=([^&#]*)", location)
        return found.group(1) if found else "(no ciba_message in %r)" % location


if __name__ == "__main__":
    with Glewlwyd(directory=tempfile.mkdtemp(prefix="glewlwyd-")) as server:
        print("glewlwyd (pid %d) ready: authority %s, files in %s" % (server.process.pid, server.authority,
                                                                     server.directory), flush=True)
        try:
            while server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
