"""brokerd against a packaged provider: Debian's glewlwyd (glewlwyd.py), on loopback, with only the
registration an administrator makes there. A private dbus-daemon, the built brokerd in shared mode
and brokerctl as an app uses it; nothing of the developer's session.

The device-code sign-in is approved as a person does it on the verification page: glewlwyd's login
API with alice's password, her consent to the client's scope, then the code (the same requests its
login page sends). The approval on a phone (CIBA, poll mode) is answered from alice's glewlwyd
session, which stands for her phone (glewlwyd.Phone); brokerd is given glewlwyd's shape of
login_hint (phoneApprovalLoginHint), then restarted without it. Then glewlwyd is killed and started
again in the middle of a device-code sign-in.

Last, the kiosk (kiosk.py): the browser suite's private desktop (Tests/Browser/harness.py: Xvfb,
the real desktop portal on a private bus, one Chromium driven by Selenium) and a brokerd on its
bus. Alice, then Bob, sign in there in the browser (`brokerctl sign-in --interactive`) on
glewlwyd's own login page in that one Chromium. glewlwyd's ID token carries auth_time 0, which
brokerd refuses; it then opens glewlwyd's end-session page in the same Chromium, where the person
confirms. The point is the next person: Bob's page must ask for his credentials with nothing of
Alice's session left. Screenshots of each page and the kiosk's logs: --artifacts.

    python3 Tests/Providers/test_providers.py --broker-bin .build/debug
"""
import argparse
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glewlwyd  # noqa: E402
import kiosk as kiosk_module  # noqa: E402

ALICE = ("alice", "alice-password-1")
BOB = ("bob", "bob-password-1")
HERE = os.path.dirname(os.path.abspath(__file__))
ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), ".build", "provider-artifacts")
BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""
CLIENT = "mail-app"


class Failure(Exception):
    pass


class Run:
    def __init__(self, broker_bin):
        self.broker_bin = broker_bin
        self.directory = tempfile.mkdtemp(prefix="providers-test-")
        self.processes = []
        self.failures = 0
        self.shots = 0
        for name in ("runtime", "home", "state"):
            os.makedirs(self.path(name), mode=0o700, exist_ok=True)
        env = {key: value for key, value in os.environ.items()
               if key not in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
        env.update({"XDG_RUNTIME_DIR": self.path("runtime"), "HOME": self.path("home"), "LANG": "C.UTF-8"})
        self.env = env

    def path(self, *parts):
        return os.path.join(self.directory, *parts)

    def check(self, condition, what, details=""):
        print("%s %s%s" % ("ok  " if condition else "FAIL", what, "" if condition else ": " + str(details)), flush=True)
        if not condition:
            self.failures += 1
        return condition

    def start_until(self, name, argv, ready, timeout=30):
        """argv with standard output read until a line starting with `ready` (bounded); standard
        error in NAME.log."""
        err = open(self.path(name + ".log"), "w")
        process = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                   close_fds=True)
        self.processes.append(process)
        deadline, buffered = time.monotonic() + timeout, b""
        while time.monotonic() < deadline:
            readable, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(process.stdout.fileno(), 4096) if readable else b""
            buffered += chunk
            for line in buffered.decode(errors="replace").splitlines():
                if line.startswith(ready):
                    return process, line
            if readable and not chunk:
                process.wait(timeout=10)
                raise Failure("%s exited (%s) before it was ready; see %s" % (name, process.returncode,
                                                                             self.path(name + ".log")))
        raise Failure("%s was not ready within %d s" % (name, timeout))

    def ctl(self, arguments, timeout=30):
        return subprocess.run([os.path.join(self.broker_bin, "brokerctl")] + arguments, env=self.env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def stop_all(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)


def wait_for_line(path, needle, process, timeout, who="brokerctl"):
    """The first line of `path` holding `needle`, while `process` runs (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as stream:
            for line in stream.read().splitlines():
                if needle in line:
                    return line
        if process.poll() is not None:
            raise Failure("%s exited (%s) before writing %r" % (who, process.returncode, needle))
        time.sleep(0.05)
    raise Failure("%s wrote no %r within %d s" % (who, needle, timeout))


def device_code_sign_in_and_out(run, server):
    """Alice signs in with the device-code flow, approved on glewlwyd's verification page; the
    device shows her; she signs out."""
    err_path = run.path("sign-in.err")
    with open(err_path, "w") as err, open(run.path("sign-in.out"), "w") as out:
        process = subprocess.Popen([os.path.join(run.broker_bin, "brokerctl"), "sign-in", "--client-id", CLIENT,
                                    "--device-code"], env=run.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    run.processes.append(process)
    line = wait_for_line(err_path, "enter the code", process, 30)
    words = line.split()
    address, code = words[words.index("open") + 1], words[words.index("code") + 1]
    run.check(address.startswith(server.authority + "/device"), "brokerctl shows glewlwyd's verification address",
              line)
    landing = server.approve_device_code(code, *ALICE)
    run.check("prompt=deviceComplete" in landing, "glewlwyd takes alice's approval of the code", landing)
    try:
        process.wait(timeout=45)
    except subprocess.TimeoutExpired:
        process.kill()
        raise Failure("brokerctl sign-in --device-code did not finish within 45 s after the approval")
    with open(run.path("sign-in.out")) as out, open(err_path) as err:
        output, errors = out.read(), err.read()
    run.check(process.returncode == 0 and ALICE[0] in output, "brokerctl sign-in --device-code signs alice in",
              "status %s: %s %s" % (process.returncode, output.strip(), errors.strip()[-600:]))
    current = run.ctl(["current-account", "--client-id", CLIENT, "--json"])
    account = (json.loads(current.stdout or "{}").get("current") or {}) if current.returncode == 0 else {}
    run.check(account.get("username") == ALICE[0], "current-account shows alice", current.stdout + current.stderr)
    identifier = account.get("identifier")
    token = run.ctl(["token", "--client-id", CLIENT, "--scope", "openid"])
    run.check(token.returncode == 0 and len(token.stdout.strip()) > 20, "brokerctl token returns her access token",
              token.stderr.strip())
    refreshed = run.ctl(["token", "--client-id", CLIENT, "--scope", "openid", "--force-refresh"])
    run.check(refreshed.returncode == 0 and len(refreshed.stdout.strip()) > 20
              and refreshed.stdout.strip() != token.stdout.strip(),
              "brokerd refreshes her token at glewlwyd (a new access token)", refreshed.stderr.strip())
    signed_out = run.ctl(["sign-out", "--client-id", CLIENT, "--json"])
    run.check(signed_out.returncode == 0, "brokerctl sign-out succeeds", signed_out.stderr.strip())
    # glewlwyd answers a public client's revocation 401: brokerd reports the refusal, gives up on it,
    # and the sign-out stands.
    result = json.loads(signed_out.stdout or "{}") if signed_out.returncode == 0 else {}
    notes = " ".join(result.get("notes", []))
    run.check(result.get("tokensRevoked") is False and "refuses to revoke tokens of this public client (HTTP 401)"
              in notes, "the sign-out's result reports glewlwyd's refusal to revoke", signed_out.stdout.strip())
    after = run.ctl(["current-account", "--client-id", CLIENT, "--json"])
    run.check(after.returncode == 0 and not json.loads(after.stdout or "{}").get("current"),
              "nobody is signed in after the sign-out", after.stdout + after.stderr)
    return identifier


def kiosk_attempt(run, kiosk, pages, person, label):
    """`brokerctl sign-in --interactive` at the kiosk for `person`: brokerd opens glewlwyd's
    authorization request in the kiosk's Chromium; on each login page it opens the person signs in
    and continues (glewlwyd refuses max_age only after that, and brokerd then asks again: a second
    login page); brokerd refuses the ID token (auth_time 0) and opens glewlwyd's end-session page in
    the same Chromium, where the person confirms. Returns what the callers check: "pages", one
    {"request", "form", "text", "landed"} per login page, and what came after."""
    browser = kiosk.browser
    known = set(browser.handles())
    since = len(kiosk.monitor.open_uri_calls())
    log_start = len(kiosk.broker.log())
    seen = {"pages": [], "cookies": set()}
    # glewlwyd logs each ID token it makes with the person's name: whose brokerd was handed.
    id_tokens = {name: "id_token generated for client '%s' granted by user '%s'" % (CLIENT, name)
                 for name in (ALICE[0], BOB[0])}
    made_before = {name: pages.server.logged(event) for name, event in id_tokens.items()}
    process = kiosk.ctl.start(["sign-in", "--client-id", CLIENT, "--interactive"], label)

    def next_login_page():
        if process.poll() is not None:
            return "finished"
        try:
            return kiosk.tab(known, lambda url: pages.is_login_page(url, "login"), 0.5, "")
        except kiosk_module.harness.Failure:
            return None

    while True:
        tab = kiosk_module.harness.wait_until(next_login_page, 45, "glewlwyd's login page (%s) or brokerctl's end"
                                              % label)
        if tab == "finished":
            break
        known.add(tab)
        number = len(seen["pages"]) + 1
        request = kiosk_module.query(browser.url()).get("callback_url", [""])[0]
        page = {"request": request, "form": pages.prefilled(), "text": browser.text()}
        seen["pages"].append(page)
        screenshot(run, kiosk, "%s-login-page-%d" % (label, number))
        run.check(page["form"] is not None, "%s: glewlwyd's login page %d in the kiosk's Chromium asks for a username "
                  "and password" % (label, number), page["text"][:300])
        proceed = pages.sign_in(person, lambda: screenshot(run, kiosk, "%s-consent-%d" % (label, number)))
        screenshot(run, kiosk, "%s-continue-%d" % (label, number))
        cookie = kiosk.session_cookies().get(kiosk_module.SESSION_COOKIES[0])
        seen["cookies"].add(cookie)
        users = pages.server.session_users(cookie) if cookie else []
        run.check(users == [person[0]], "%s: glewlwyd greets %s; the login session Chromium holds is %s's alone"
                  % (label, person[0], person[0]), users)
        proceed.click()
        redirect = kiosk_module.query(request).get("redirect_uri", ["?"])[0]
        page["landed"] = kiosk_module.harness.wait_until(
            lambda: browser.url() if browser.url().startswith(redirect) else None, 20,
            "the redirect to brokerd's listener (%s)" % redirect)
    status, out, err = kiosk.ctl.finish(process, 30)
    seen["brokerctl"] = out + err
    seen["id tokens"] = {name: pages.server.logged(event) - made_before[name] for name, event in id_tokens.items()}
    run.check(status != 0 and "AccessDenied" in err and "no usable auth_time (0)" in err
              and "session in the browser was ended" in err,
              "%s: brokerd refuses glewlwyd's ID token with auth_time 0 (AccessDenied) and says it ended the browser "
              "session" % label, "status %s: %s %s" % (status, out.strip(), err.strip()[-600:]))
    run.check(kiosk.ctl.current(CLIENT) is None, "%s: the device stays signed out" % label)
    kiosk.tab(known, lambda url: pages.is_login_page(url, "end_session"), 20, "glewlwyd's end-session page (%s)"
              % label)
    logout = pages.end_session_shown()
    screenshot(run, kiosk, label + "-end-session")
    logout.click()
    seen["closed"] = pages.session_closed()
    screenshot(run, kiosk, label + "-session-closed")
    seen["opened"] = len(kiosk.started_by_broker(since))
    seen["log"] = kiosk.broker.log()[log_start:]
    seen["cookies after"] = kiosk.session_cookies()
    seen["session users after"] = sorted({user for cookie in seen["cookies"] if cookie
                                          for user in pages.server.session_users(cookie)})
    return seen


def screenshot(run, kiosk, name):
    run.shots += 1
    path = kiosk.browser.screenshot("%02d-%s" % (run.shots, name))
    run.check(path is not None and os.path.getsize(path) > 1000, "screenshot %s saved" % os.path.basename(path or name))


def two_people_at_the_kiosk(run, server, kiosk):
    """Alice, then Bob, at one kiosk with one Chromium (docs/providers.md, "Debian's glewlwyd")."""
    pages = kiosk_module.GlewlwydPages(kiosk, server)
    query = kiosk_module.query
    alice = kiosk_attempt(run, kiosk, pages, ALICE, "alice")
    requests = [query(page["request"]) for page in alice["pages"]]
    landed = [query(page.get("landed", "")) for page in alice["pages"]]
    forms = [page["form"] for page in alice["pages"]]
    run.check(forms[:1] == [("", "", False)], "alice: her first login page shows an empty form", forms)
    run.check(forms[1:] == [("alice", "", True)], "alice: her second one, with her glewlwyd session of a moment ago "
              "in Chromium, has her username filled in and offers \"Manage connected users\"", forms)
    run.check(len(requests) == 2 and requests[0].get("max_age") == ["0"] and requests[0].get("prompt") == ["login"]
              and landed[0].get("error") == ["invalid_request"]
              and "max_age" in landed[0].get("error_description", [""])[0],
              "alice: brokerd's first request (prompt=login, max_age=0) showed glewlwyd's login page, and glewlwyd "
              "refused max_age (invalid_request) only after she signed in", [p.get("landed") for p in alice["pages"]])
    run.check("the provider refuses max_age" in alice["log"] and len(requests) == 2
              and requests[1].get("prompt") == ["login"] and "max_age" not in requests[1]
              and "code" in landed[1] and "error" not in landed[1],
              "alice: brokerd asked again with prompt=login alone: a second login page, where she signed in again, "
              "and glewlwyd's code went to brokerd", [p["request"] for p in alice["pages"]])
    run.check(alice["opened"] == 3, "alice: brokerd opened three pages through the portal (the request, the request "
              "again, the end-session page)", str(alice["opened"]))
    run.check(alice["closed"], "alice: glewlwyd's end-session page, confirmed in Chromium (Logout), says she is "
              "disconnected", kiosk.browser.text()[:300])
    run.check(not alice["cookies after"] and alice["session users after"] == [],
              "alice: her glewlwyd session is over: no glewlwyd session cookie left in Chromium, and those she had "
              "open nothing at glewlwyd", "%s; glewlwyd's sessions hold %s" % (alice["cookies after"],
                                                                              alice["session users after"]))
    kiosk.browser.close_tabs()

    values = {cookie.get("value") for cookie in kiosk.browser.cookies()}
    run.check(not kiosk.session_cookies() and not (alice["cookies"] & values),
              "before bob: Chromium holds no glewlwyd session cookie (none of alice's)", str(kiosk.session_cookies()))
    bob = kiosk_attempt(run, kiosk, pages, BOB, "bob")
    requests = [query(page["request"]) for page in bob["pages"]]
    run.check(len(requests) == 1 and "the provider refuses max_age" not in bob["log"]
              and requests[0].get("prompt") == ["login"] and "max_age" not in requests[0],
              "bob: brokerd remembered glewlwyd's refusal of max_age: one login page, his request with prompt=login "
              "alone", [page["request"] for page in bob["pages"]])
    shown = bob["pages"][0] if bob["pages"] else {"form": None, "text": "no login page"}
    run.check(shown["form"] == ("", "", False) and "alice" not in shown["text"].lower(),
              "bob: his login page asks for credentials in an empty form, with nobody's session in Chromium (no "
              "alice filled in, no \"Manage connected users\")", "%s %s" % (shown["form"], shown["text"][:300]))
    run.check(bob["id tokens"] == {ALICE[0]: 0, BOB[0]: 1} and alice["id tokens"] == {ALICE[0]: 1, BOB[0]: 0},
              "the ID token brokerd refused in bob's attempt was bob's (glewlwyd's log), in alice's hers",
              "bob's attempt: %s; alice's: %s" % (bob["id tokens"], alice["id tokens"]))
    run.check("alice" not in bob["brokerctl"].lower() and "alice" not in bob["log"].lower(),
              "bob: neither brokerctl nor brokerd's log names alice for his attempt",
              bob["brokerctl"][-300:] + bob["log"][-300:])
    run.check(bob["opened"] == 2, "bob: brokerd opened two pages (his request, the end-session page)",
              str(bob["opened"]))
    run.check(bob["closed"] and not bob["cookies after"] and bob["session users after"] == [],
              "bob: his glewlwyd session ended on the end-session page too", "%s; %s" % (
                  bob["cookies after"], bob["session users after"]))
    kiosk.browser.close_tabs()


def at_the_kiosk(run, server, ports_setting, artifacts):
    """The kiosk's part: its desktop, Chromium and brokerd, two people, then all of it stopped."""
    begun = time.monotonic()
    kiosk = None
    try:
        kiosk = kiosk_module.Kiosk(run.broker_bin, server, ports_setting, artifacts)
        print("the kiosk: Xvfb, xdg-desktop-portal (OpenURI %d), Chromium %s, brokerd on its bus, ready in %.1f s"
              % (kiosk.portal_version, kiosk.browser.version, time.monotonic() - begun), flush=True)
        two_people_at_the_kiosk(run, server, kiosk)
    except Exception as error:  # a wait that ran out, or Selenium's own error: with what the tab showed
        where = ""
        if kiosk is not None:
            try:
                kiosk.browser.screenshot("failure")
                where = "; the tab: " + kiosk.browser.url()
            except Exception:  # the browser itself is gone
                pass
        run.check(False, "the kiosk's part ran to its end", "".join(
            traceback.format_exception_only(error)).strip() + where)
    finally:
        if kiosk is not None:
            kiosk.close()
    print("the kiosk's part took %.1f s; screenshots and logs in %s" % (time.monotonic() - begun, artifacts),
          flush=True)


def shown_binding_message(line):
    """KTW-482 from brokerctl's "... Approve it only if the phone shows KTW-482"."""
    found = re.search(r"the phone shows (\S+)", line)
    if not found:
        raise Failure("brokerctl's line names no binding message: %r" % line)
    return found.group(1).rstrip(".")


def start_phone_sign_in(run, name):
    """`brokerctl sign-in --approve-on-phone` for alice, until it shows the binding message."""
    err_path = run.path(name + ".err")
    with open(err_path, "w") as err, open(run.path(name + ".out"), "w") as out:
        process = subprocess.Popen([os.path.join(run.broker_bin, "brokerctl"), "sign-in", "--client-id", CLIENT,
                                    "--username", ALICE[0], "--approve-on-phone"], env=run.env, stdout=out,
                                   stderr=err, stdin=subprocess.DEVNULL)
    run.processes.append(process)
    line = wait_for_line(err_path, "Approve it only if the phone shows", process, 30)
    return process, shown_binding_message(line)


def finished(run, process, name, timeout=45):
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise Failure("brokerctl %s did not finish within %d s after the phone answered" % (name, timeout))
    with open(run.path(name + ".out")) as out, open(run.path(name + ".err")) as err:
        return process.returncode, out.read(), err.read()


def phone_approval(run, server, alice_id):
    """Approval on a phone (CIBA, poll mode) with brokerd's phoneApprovalLoginHint set to
    glewlwyd's shape: alice's request is listed in her glewlwyd session (her "phone") with the
    binding message brokerctl shows; approved, the device is hers (`alice_id`, her account's
    identifier from the device-code sign-in); denied, AccessDenied.

    glewlwyd 2.7.5's CIBA ID token carries none of the user's claims (generate_ciba_token_response
    hands generate_id_token the user's "user" member, which it does not have), so no
    preferred_username: brokerd reads her names from userinfo, as for any ID token that names
    nobody but its sub."""
    options = run.ctl(["sign-in-options", "--client-id", CLIENT, "--json"])
    flows = (json.loads(options.stdout or "{}").get("flows") or []) if options.returncode == 0 else []
    run.check("ciba" in flows, "sign-in-options lists ciba (glewlwyd's discovery names its CIBA endpoint, poll mode)",
              options.stdout + options.stderr)
    phone = server.phone(*ALICE)

    process, binding = start_phone_sign_in(run, "phone-approve")
    request = phone.waiting(binding)
    run.check(request.get("client_id") == CLIENT and request.get("binding_message") == binding,
              "alice's phone lists the request with the binding message brokerctl shows (%s)" % binding,
              json.dumps(request))
    answer = phone.answer(request, approve=True)
    run.check(answer == "complete", "glewlwyd takes alice's approval on her phone", answer)
    status, output, errors = finished(run, process, "phone-approve")
    run.check(status == 0 and bool(alice_id) and alice_id in output,
              "brokerctl sign-in --approve-on-phone signs alice in (her account, %s)" % alice_id,
              "status %s: %s %s" % (status, output.strip(), errors.strip()[-600:]))
    current = run.ctl(["current-account", "--client-id", CLIENT, "--json"])
    account = (json.loads(current.stdout or "{}").get("current") or {}) if current.returncode == 0 else {}
    run.check(account.get("identifier") == alice_id and account.get("username") == ALICE[0],
              "the device is alice's after her approval, named as userinfo names her (glewlwyd's CIBA ID token "
              "has no preferred_username)", current.stdout + current.stderr)
    token = run.ctl(["token", "--client-id", CLIENT, "--scope", "openid"])
    run.check(token.returncode == 0 and len(token.stdout.strip()) > 20, "brokerctl token returns her access token",
              token.stderr.strip())
    signed_out = run.ctl(["sign-out", "--client-id", CLIENT, "--json"])
    after = run.ctl(["current-account", "--client-id", CLIENT, "--json"])
    run.check(signed_out.returncode == 0 and after.returncode == 0
              and not json.loads(after.stdout or "{}").get("current"),
              "she signs out; nobody is signed in", signed_out.stderr + after.stdout + after.stderr)

    process, binding = start_phone_sign_in(run, "phone-deny")
    request = phone.waiting(binding)
    answer = phone.answer(request, approve=False)
    run.check(answer == "cancelled", "glewlwyd takes alice's denial on her phone", answer)
    status, output, errors = finished(run, process, "phone-deny")
    run.check(status != 0 and "AccessDenied" in errors and "denied on the phone" in errors,
              "the denied sign-in ends with AccessDenied", "status %s: %s %s" % (status, output.strip(),
                                                                                errors.strip()[-600:]))
    after = run.ctl(["current-account", "--client-id", CLIENT, "--json"])
    run.check(after.returncode == 0 and not json.loads(after.stdout or "{}").get("current"),
              "the device stays signed out after the denial", after.stdout + after.stderr)
    run.check(phone.requests() == [], "nothing is left waiting on alice's phone", json.dumps(phone.requests()))


def phone_approval_plain_hint(run, server):
    """brokerd without phoneApprovalLoginHint sends the username as typed, which glewlwyd answers
    with a bare 400 invalid_request: brokerd's refusal names the setting, and nobody's phone is asked."""
    result = run.ctl(["sign-in", "--client-id", CLIENT, "--username", ALICE[0], "--approve-on-phone"], timeout=60)
    run.check(result.returncode != 0 and "ServerError" in result.stderr
              and "the provider answered 400 invalid_request" in result.stderr
              and "phoneApprovalLoginHint" in result.stderr and '{"username":"NAME"}' in result.stderr,
              "a plain login_hint: brokerd's refusal names glewlwyd's 400 invalid_request and phoneApprovalLoginHint",
              "status %s: %s %s" % (result.returncode, result.stdout.strip(), result.stderr.strip()))
    phone = server.phone(*ALICE)
    run.check(phone.requests() == [], "nothing reaches alice's phone", json.dumps(phone.requests()))


def device_code_through_an_outage(run, server, brokerd, log_name, alice_id):
    """A device-code sign-in while glewlwyd goes down (killed) and comes back on the same port and
    database: brokerd waits the outage out (the code's lifetime), the code survives glewlwyd's
    restart, and alice's approval after it signs the device in."""
    err_path = run.path("outage.err")
    with open(err_path, "w") as err, open(run.path("outage.out"), "w") as out:
        process = subprocess.Popen([os.path.join(run.broker_bin, "brokerctl"), "sign-in", "--client-id", CLIENT,
                                    "--device-code"], env=run.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    run.processes.append(process)
    words = wait_for_line(err_path, "enter the code", process, 30).split()
    code = words[words.index("code") + 1]
    server.crash()
    # brokerd's own word that a poll met the outage, not a guess at how long that takes.
    wait_for_line(run.path(log_name + ".log"), "the provider is unavailable; the device code sign-in polls again later",
                  brokerd, 60, who="brokerd")
    run.check(process.poll() is None, "brokerctl still waits for the device code while glewlwyd is down",
              "it exited (%s)" % process.returncode)
    server.restart()
    landing = server.approve_device_code(code, *ALICE)
    run.check("prompt=deviceComplete" in landing, "the restarted glewlwyd still knows the code and takes alice's "
              "approval", landing)
    status, output, errors = finished(run, process, "outage", timeout=90)
    run.check(status == 0 and ALICE[0] in output, "brokerctl sign-in --device-code signs alice in after the outage",
              "status %s: %s %s" % (status, output.strip(), errors.strip()[-600:]))
    current = run.ctl(["current-account", "--client-id", CLIENT, "--json"])
    account = (json.loads(current.stdout or "{}").get("current") or {}) if current.returncode == 0 else {}
    run.check(account.get("username") == ALICE[0] and account.get("identifier") == alice_id,
              "the device is alice's after the outage", current.stdout + current.stderr)
    signed_out = run.ctl(["sign-out", "--client-id", CLIENT, "--json"])
    run.check(signed_out.returncode == 0, "she signs out", signed_out.stderr.strip())


def start_brokerd(run, server, name, settings):
    """brokerd in shared mode against glewlwyd, with `settings` as its --config file."""
    with open(run.path(name + ".json"), "w") as conf:
        json.dump(settings, conf)
    process, _ = run.start_until(name, [os.path.join(run.broker_bin, "brokerd"), "--device-mode", "shared",
                                        "--authority", server.authority, "--state-dir", run.path("state"),
                                        "--config", run.path(name + ".json"),
                                        "--token-storage", "plaintext-file", "--log-level", "debug"],
                                 "brokerd ready:")
    return process


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker-bin", required=True, help="where brokerd and brokerctl are (swift build's bin)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories and print them")
    parser.add_argument("--artifacts", default=ARTIFACTS,
                        help="where the kiosk's screenshots and logs go (default: .build/provider-artifacts)")
    args = parser.parse_args()
    artifacts = os.path.abspath(args.artifacts)
    os.makedirs(artifacts, exist_ok=True)
    for old in os.listdir(artifacts):
        if old.endswith(".png"):
            os.remove(os.path.join(artifacts, old))
    run = Run(os.path.abspath(args.broker_bin))
    started = time.monotonic()
    try:
        # Ports for brokerd's redirect listener, registered exactly at glewlwyd; a base of its own
        # each run, so that two runs on one machine do not meet.
        base = 41000 + (os.getpid() % 200) * 10
        ports = range(base, base + 10)
        with glewlwyd.Glewlwyd(directory=run.path("glewlwyd"), redirect_ports=ports) as server:
            print("glewlwyd %s (pid %d) configured in %.1f s" % (server.authority, server.process.pid,
                                                               time.monotonic() - started), flush=True)
            # No service directories: nothing of the machine's (its desktop portal) is activated.
            with open(run.path("bus.conf"), "w") as conf:
                conf.write(BUS_CONFIG % run.path("runtime"))
            _, line = run.start_until("dbus-daemon", ["dbus-daemon", "--config-file=" + run.path("bus.conf"),
                                                      "--nofork", "--print-address=1"], "unix:")
            run.env["DBUS_SESSION_BUS_ADDRESS"] = line.strip()
            ports_setting = {"loopbackRedirectPorts": "%d-%d" % (ports[0], ports[-1])}
            run.env.pop("INVOCATION_ID", None)
            # glewlwyd reads CIBA's login_hint as a JSON object only (docs/providers.md).
            brokerd = start_brokerd(run, server, "brokerd",
                                    dict(ports_setting, phoneApprovalLoginHint='{"username":"{username}"}'))
            alice_id = device_code_sign_in_and_out(run, server)
            phone_approval(run, server, alice_id)
            stop(brokerd)
            plain = start_brokerd(run, server, "brokerd-plain-hint", ports_setting)
            phone_approval_plain_hint(run, server)
            device_code_through_an_outage(run, server, plain, "brokerd-plain-hint", alice_id)
            stop(plain)
            at_the_kiosk(run, server, ports_setting, artifacts)
    except (Failure, glewlwyd.GlewlwydError, OSError, subprocess.SubprocessError, ValueError) as error:
        run.check(False, "the suite ran to its end", str(error))
    finally:
        run.stop_all()
    print("%s in %.1f s" % ("FAILED (%d)" % run.failures if run.failures else "passed", time.monotonic() - started))
    if args.keep or run.failures:
        print("files: %s" % run.directory)
    else:
        shutil.rmtree(run.directory, ignore_errors=True)
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
