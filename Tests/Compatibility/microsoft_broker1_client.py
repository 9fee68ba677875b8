#!/usr/bin/python3
"""Independent test client of Microsoft's Linux identity-broker D-Bus protocol.

This script talks to a broker over `com.microsoft.identity.broker1`
(object `/com/microsoft/identity/broker1`, interface
`com.microsoft.identity.Broker1`) the way Microsoft's and third-party clients
do, and checks the replies.  It was written ONLY from the protocol document
`shared/design/microsoft-broker1-protocol.md` and the description of the
broker's native interface (`io.shareddevice.Broker1`), not from the server's
code, so that it checks the document's contract rather than restating the
implementation.

Assumptions about the environment (set up by whoever runs it):
  * a private dbus-daemon at --address (never the session bus) on which the
    broker owns both `com.microsoft.identity.broker1` and
    `io.shareddevice.Broker1`;
  * the broker runs in shared device mode and nobody is signed in at start;
  * the identity provider is an OpenID Connect simulator at --idp-base-url,
    whose `GET /v1.0/me` answers 200 for a valid bearer access token, and
    whose tenant id is a GUID;
  * the broker's BROWSER opens nothing, so interactive sign-ins time out
    after a few seconds unless cancelled.

Output is TAP-like: one `ok N - what` / `not ok N - what: details` line per
check, `# ...` comment lines, and a final `# N checks, F failed`.  Tokens are
never printed beyond their first 8 characters; passwords never.  Exit status
is 0 when every check passed, 1 when some failed, 2 on bad usage.

Usage:
  microsoft_broker1_client.py --address ADDR --idp-base-url URL \\
      --username U --password P --other-username U2 --other-password P2 \\
      --client-id A --other-client-id B
"""

import argparse
import base64
import json
import re
import sys
import time
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET

import dbus
import dbus.bus
import dbus.mainloop.glib
from gi.repository import GLib

# --------------------------------------------------------------------------
# Names and constants
# --------------------------------------------------------------------------

MS_BUS_NAME = "com.microsoft.identity.broker1"
MS_PATH = "/com/microsoft/identity/broker1"
MS_IFACE = "com.microsoft.identity.Broker1"
MS_METHODS = (
    "acquireTokenInteractively",
    "acquireTokenSilently",
    "getAccounts",
    "removeAccount",
    "acquirePrtSsoCookie",
    "generateSignedHttpRequest",
    "cancelInteractiveFlow",
    "getLinuxBrokerVersion",
)
PROTOCOL_VERSION = "0.0"

NATIVE_BUS_NAME = "io.shareddevice.Broker1"
NATIVE_PATH = "/io/shareddevice/Broker1"
NATIVE_IFACE = "io.shareddevice.Broker1"
NATIVE_SCOPES = ["User.Read"]

AUTHORITY_HOST = "https://login.microsoftonline.com"
AUTHORITY_COMMON = AUTHORITY_HOST + "/common"
GRAPH_DEFAULT_SCOPE = "https://graph.microsoft.com/.default"

# MSAL runtime response statuses (from the document).
ST_INTERACTION_REQUIRED = 2
ST_API_CONTRACT_VIOLATION = 6
ST_USER_CANCELED = 7
ST_APPLICATION_CANCELED = 8
ST_INCORRECT_CONFIGURATION = 9
ST_AUTHORITY_UNTRUSTED = 11
ST_ACCOUNT_NOT_FOUND = 16

ERROR_KEYS = ("context", "errorCode", "status", "subStatus", "tag")
ERROR_INT_KEYS = ("errorCode", "status", "subStatus", "tag")

CALL_TIMEOUT = 30.0          # seconds, every ordinary method call
INTERACTIVE_TIMEOUT = 60.0   # seconds, the asynchronous interactive call
CANCEL_ANSWER_WITHIN = 10.0  # seconds, interactive call must answer after cancel
CANCEL_RETRIES = 20
CANCEL_RETRY_DELAY_MS = 100
HTTP_TIMEOUT = 10.0
TWO_DAYS_S = 2 * 24 * 3600

BASE64URL_RE = re.compile(r"^[A-Za-z0-9_-]+$")
BASE64URL_OR_EMPTY_RE = re.compile(r"^[A-Za-z0-9_-]*$")
VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
TOKENISH_KEY_RE = re.compile(r"token|password|secret|cookie|signedhttprequest|assertion",
                             re.IGNORECASE)


# --------------------------------------------------------------------------
# Small value helpers
# --------------------------------------------------------------------------

def is_int(value):
    """A JSON integer (Python bool is an int subclass: exclude it)."""
    return isinstance(value, int) and not isinstance(value, bool)


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def short(token):
    """At most the first 8 characters of a token, for messages."""
    if not isinstance(token, str):
        return repr(type(token).__name__)
    return token[:8] + ("..." if len(token) > 8 else "")


def redact(value):
    """A copy of a JSON value with every token-like string cut to 8 characters."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(item, str) and TOKENISH_KEY_RE.search(str(key)):
                out[key] = short(item)
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def brief_json(value, limit=300):
    text = json.dumps(redact(value), sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "...(%d chars)" % len(text)


def unwrap(value):
    """dbus-python values -> plain Python values."""
    if isinstance(value, dbus.Boolean):
        return bool(value)
    if isinstance(value, (dbus.Dictionary, dict)):
        return {str(k): unwrap(v) for k, v in value.items()}
    if isinstance(value, (dbus.Array, dbus.Struct, list, tuple)):
        return [unwrap(v) for v in value]
    if isinstance(value, (dbus.String, dbus.ObjectPath, dbus.Signature)):
        return str(value)
    if isinstance(value, (dbus.Byte, dbus.Int16, dbus.Int32, dbus.Int64,
                          dbus.UInt16, dbus.UInt32, dbus.UInt64)):
        return int(value)
    if isinstance(value, dbus.Double):
        return float(value)
    return value


def same_user(a, b):
    return isinstance(a, str) and isinstance(b, str) and a.casefold() == b.casefold()


def scope_list(granted):
    return granted.split() if isinstance(granted, str) else []


def has_scope(granted, wanted):
    """True when the space-separated `granted` names `wanted` (optionally with a
    resource prefix such as https://graph.microsoft.com/User.Read)."""
    wanted = wanted.casefold()
    for scope in scope_list(granted):
        scope = scope.casefold()
        if scope == wanted or scope.endswith("/" + wanted):
            return True
    return False


def run_until(predicate, timeout_s):
    """Iterate the GLib main loop until predicate() is true or timeout_s passed.

    The wait is bounded by a GLib timeout source (no sleeping)."""
    if predicate():
        return True
    context = GLib.MainContext.default()
    expired = [False]

    def on_timeout():
        expired[0] = True
        return False

    source = GLib.timeout_add(max(1, int(timeout_s * 1000)), on_timeout)
    try:
        while not predicate() and not expired[0]:
            context.iteration(True)
    finally:
        if not expired[0]:
            GLib.source_remove(source)
    return predicate()


def describe_dbus_error(exc):
    if isinstance(exc, dbus.DBusException):
        return "D-Bus error %s: %s" % (exc.get_dbus_name(), (exc.get_dbus_message() or "")[:200])
    return "%s: %s" % (type(exc).__name__, str(exc)[:200])


class CallError(Exception):
    """A call that did not produce a usable reply (D-Bus error, timeout, non-JSON,
    non-object)."""


class Skip(Exception):
    """A check that cannot run because an earlier check failed to provide input."""


# --------------------------------------------------------------------------
# TAP output
# --------------------------------------------------------------------------

class Tap:
    def __init__(self, passwords):
        self.count = 0
        self.failed = 0
        # Strings that must never appear in the output: passwords (replaced
        # by ***) and tokens seen in replies (cut to their first 8 characters).
        self._passwords = [p for p in passwords if p]
        self._tokens = []

    def add_secret(self, token):
        if isinstance(token, str) and len(token) > 8 and token not in self._tokens:
            self._tokens.append(token)

    def scrub(self, text):
        text = str(text).replace("\n", " ")
        for token in sorted(self._tokens, key=len, reverse=True):
            text = text.replace(token, short(token))
        for password in self._passwords:
            text = text.replace(password, "***")
        return text

    def comment(self, text):
        print("# " + self.scrub(text), flush=True)

    def check(self, cond, what, details=""):
        self.count += 1
        text = what
        if not cond:
            self.failed += 1
            if details:
                text += ": " + details
        print("%s %d - %s" % ("ok" if cond else "not ok", self.count, self.scrub(text)),
              flush=True)
        return bool(cond)

    def run(self, what, fn):
        """Run one check: fn() returns a list of problems (empty/None = ok) or a
        string; CallError and Skip become a failed check; anything else
        unexpected is reported and the run goes on.  `what` may be a callable,
        evaluated after fn() (so that the line can say what fn() found)."""
        try:
            problems = fn()
            details = None
        except CallError as exc:
            details = str(exc)
        except Skip as exc:
            details = "not run: " + str(exc)
        except Exception as exc:  # keep going after a bug in a check
            details = "internal error: %s: %s" % (type(exc).__name__, exc)
        if callable(what):
            what = what()
        if details is not None:
            return self.check(False, what, details)
        if isinstance(problems, str):
            problems = [problems]
        problems = [p for p in (problems or []) if p]
        return self.check(not problems, what, "; ".join(problems))

    def finish(self):
        print("# %d checks, %d failed" % (self.count, self.failed), flush=True)
        return 0 if self.failed == 0 else 1


# --------------------------------------------------------------------------
# Validators (each returns a list of problem strings)
# --------------------------------------------------------------------------

def error_object_problems(err, statuses):
    problems = []
    if not isinstance(err, dict):
        return ["error is %s, not an object" % type(err).__name__]
    missing = [k for k in ERROR_KEYS if k not in err]
    if missing:
        problems.append("error object lacks %s" % ", ".join(missing))
    if "context" in err and not isinstance(err["context"], str):
        problems.append("error.context is %s, not a string" % type(err["context"]).__name__)
    for key in ERROR_INT_KEYS:
        if key in err and not is_int(err[key]):
            problems.append("error.%s is %s, not an int" % (key, type(err[key]).__name__))
    status = err.get("status")
    if statuses is not None and status not in statuses:
        problems.append("error.status is %r, expected %s"
                        % (status, " or ".join(str(s) for s in statuses)))
    return problems


def find_error(resp):
    """(error_object, where) or (None, None). where: 'brokerTokenResponse' or 'top level'."""
    btr = resp.get("brokerTokenResponse")
    if isinstance(btr, dict) and "error" in btr:
        return btr["error"], "brokerTokenResponse"
    if "error" in resp:
        return resp["error"], "top level"
    return None, None


def require_error(resp, statuses, where="either"):
    """Problems unless resp carries an error object with one of `statuses`.

    where: 'brokerTokenResponse', 'top level' or 'either'.
    Returns (problems, location_found)."""
    err, found = find_error(resp)
    if err is None:
        return (["no error object in reply %s" % brief_json(resp)], None)
    problems = []
    if where != "either" and found != where:
        problems.append("error object is at %s, expected in %s" % (found, where))
    problems += error_object_problems(err, statuses)
    if problems:
        problems.append("reply %s" % brief_json(resp))
    return problems, found


def client_info_problems(client_info, oid, tid, label="clientInfo"):
    problems = []
    if not isinstance(client_info, str) or not client_info:
        return ["%s is %r, not a non-empty string" % (label, type(client_info).__name__)]
    if not BASE64URL_RE.match(client_info):
        problems.append("%s is not base64url without padding" % label)
        return problems
    try:
        decoded = json.loads(b64url_decode(client_info).decode("utf-8"))
    except Exception as exc:
        return ["%s does not decode to JSON (%s)" % (label, exc)]
    if not isinstance(decoded, dict):
        return ["%s decodes to %s, not an object" % (label, type(decoded).__name__)]
    if decoded.get("uid") != oid or decoded.get("utid") != tid:
        problems.append("%s decodes to uid=%r utid=%r, expected uid=%r utid=%r"
                        % (label, decoded.get("uid"), decoded.get("utid"), oid, tid))
    return problems


def account_problems(acct, username):
    """The account object as the document lists it."""
    if not isinstance(acct, dict):
        return ["account is %s, not an object" % type(acct).__name__]
    problems = []
    for key in ("environment", "homeAccountId", "localAccountId", "realm", "username",
                "name", "givenName", "passwordExpiry", "clientInfo"):
        if key not in acct:
            problems.append("account lacks %s" % key)
    for key in ("environment", "homeAccountId", "localAccountId", "realm", "username",
                "name", "givenName", "clientInfo"):
        if key in acct and not isinstance(acct[key], str):
            problems.append("account.%s is %s, not a string" % (key, type(acct[key]).__name__))
    for key in ("environment", "homeAccountId", "localAccountId", "realm"):
        if isinstance(acct.get(key), str) and not acct[key]:
            problems.append("account.%s is empty" % key)
    if "familyName" in acct and not isinstance(acct["familyName"], str):
        problems.append("account.familyName is %s, not a string"
                        % type(acct["familyName"]).__name__)
    if "passwordExpiry" in acct and not (is_int(acct["passwordExpiry"])
                                         and acct["passwordExpiry"] == 0):
        problems.append("account.passwordExpiry is %r, expected int 0" % (acct["passwordExpiry"],))
    oid, tid = acct.get("localAccountId"), acct.get("realm")
    if isinstance(oid, str) and isinstance(tid, str):
        if acct.get("homeAccountId") != "%s.%s" % (oid, tid):
            problems.append("homeAccountId %r != localAccountId.realm %r"
                            % (acct.get("homeAccountId"), "%s.%s" % (oid, tid)))
        try:
            uuid.UUID(tid)
        except ValueError:
            problems.append("realm %r does not parse as a UUID" % tid)
        if "clientInfo" in acct:
            problems += client_info_problems(acct["clientInfo"], oid, tid, "account.clientInfo")
    if "username" in acct and not same_user(acct.get("username"), username):
        problems.append("account.username is %r, expected %r" % (acct.get("username"), username))
    return problems


def jwt_problems(token, label="idToken"):
    if not isinstance(token, str) or not token:
        return ["%s is %s, not a non-empty string" % (label, type(token).__name__)]
    parts = token.split(".")
    if len(parts) != 3:
        return ["%s has %d dot-separated parts, expected 3" % (label, len(parts))]
    header, payload, signature = parts
    problems = []
    if not BASE64URL_RE.match(header) or not BASE64URL_RE.match(payload) \
            or not BASE64URL_OR_EMPTY_RE.match(signature):
        return ["%s parts are not base64url" % label]
    for part_name, part in (("header", header), ("payload", payload)):
        try:
            decoded = json.loads(b64url_decode(part).decode("utf-8"))
        except Exception as exc:
            problems.append("%s %s does not decode to JSON (%s)" % (label, part_name, exc))
            continue
        if not isinstance(decoded, dict):
            problems.append("%s %s decodes to %s, not an object"
                            % (label, part_name, type(decoded).__name__))
    return problems


def token_response_problems(resp, home_account_id, scope="User.Read"):
    """A successful `brokerTokenResponse` as the document lists it.

    scope: a scope that grantedScopes must name, or None to only require a
    non-empty string."""
    btr = resp.get("brokerTokenResponse")
    if not isinstance(btr, dict):
        return ["no brokerTokenResponse object in reply %s" % brief_json(resp)]
    if "error" in btr:
        return ["brokerTokenResponse carries an error: %s" % brief_json(btr["error"])]
    problems = []
    now_ms = time.time() * 1000
    token = btr.get("accessToken")
    if not isinstance(token, str) or not token:
        problems.append("accessToken missing or empty")
    if "accessTokenType" not in btr:
        problems.append("accessTokenType missing")
    elif not (is_int(btr["accessTokenType"]) and btr["accessTokenType"] == 0):
        problems.append("accessTokenType is %r, expected int 0" % (btr["accessTokenType"],))
    for key in ("expiresOn", "extendedExpiresOn"):
        value = btr.get(key)
        if not is_int(value):
            problems.append("%s is %r, not an int" % (key, value))
        elif not now_ms < value < now_ms + TWO_DAYS_S * 1000:
            problems.append("%s=%d is not milliseconds within the next 2 days (now %d ms)"
                            % (key, value, int(now_ms)))
    problems += jwt_problems(btr.get("idToken"), "idToken")
    granted = btr.get("grantedScopes")
    if not isinstance(granted, str):
        problems.append("grantedScopes is %s, not ONE string" % type(granted).__name__)
    elif not granted.strip():
        problems.append("grantedScopes is empty")
    elif scope and not has_scope(granted, scope):
        problems.append("grantedScopes %r does not name %s" % (granted, scope))
    acct = btr.get("account")
    if not isinstance(acct, dict):
        problems.append("account is %s, not an object" % type(acct).__name__)
    else:
        if home_account_id is not None and acct.get("homeAccountId") != home_account_id:
            problems.append("account.homeAccountId %r != %r"
                            % (acct.get("homeAccountId"), home_account_id))
        oid, tid = acct.get("localAccountId"), acct.get("realm")
        if (not isinstance(oid, str) or not isinstance(tid, str)) and \
                isinstance(acct.get("homeAccountId"), str) and "." in acct["homeAccountId"]:
            oid, tid = acct["homeAccountId"].split(".", 1)
        if "clientInfo" not in btr:
            problems.append("clientInfo missing")
        else:
            problems += client_info_problems(btr["clientInfo"], oid, tid, "clientInfo")
    return problems


# --------------------------------------------------------------------------
# The test client
# --------------------------------------------------------------------------

class Client:
    def __init__(self, args, tap):
        self.args = args
        self.tap = tap
        self.bus = None
        self.events = []                 # AccountChanged signals: dicts
        self.events_at_last_reply = 0    # len(events) when the last reply arrived
        self.acct = None                 # account object from getAccounts (check 6)
        self.native_account = None       # account from native SignInWithPassword

    # ---- connection and D-Bus plumbing ---------------------------------

    def connect(self):
        mainloop = dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
        self.bus = dbus.bus.BusConnection(self.args.address, mainloop=mainloop)

    def subscribe(self):
        """Receive the native AccountChanged signal on this connection."""
        self.bus.add_signal_receiver(self._on_account_changed,
                                     signal_name="AccountChanged",
                                     dbus_interface=NATIVE_IFACE,
                                     path=NATIVE_PATH)

    def _on_account_changed(self, current, previous, reason):
        self.events.append({"current": unwrap(current), "previous": unwrap(previous),
                            "reason": str(reason)})

    def dbus_call(self, bus_name, path, iface, method, signature, args,
                  timeout=CALL_TIMEOUT):
        """An asynchronous call waited for on the GLib main loop, so that
        signals are dispatched in order with replies.  Returns the reply's
        values (a list) or raises CallError."""
        state = {"done": False, "reply": None, "error": None}

        def on_reply(*values):
            self.events_at_last_reply = len(self.events)
            state.update(done=True, reply=list(values))

        def on_error(exc):
            self.events_at_last_reply = len(self.events)
            state.update(done=True, error=exc)

        self.bus.call_async(bus_name, path, iface, method, signature, args,
                            on_reply, on_error, timeout=timeout)
        if not run_until(lambda: state["done"], timeout + 2.0):
            raise CallError("%s.%s: no reply within %.0f s" % (iface, method, timeout + 2.0))
        if state["error"] is not None:
            raise CallError("%s: %s" % (method, describe_dbus_error(state["error"])))
        return state["reply"]

    # ---- Microsoft protocol ------------------------------------------------

    @staticmethod
    def encode(request):
        return request if isinstance(request, str) else json.dumps(request)

    def parse(self, method, raw, cid):
        if not isinstance(raw, str):
            raise CallError("%s (cid %s) answered %s, not a string"
                            % (method, cid[:8], type(raw).__name__))
        try:
            obj = json.loads(raw)
        except ValueError:
            raise CallError("%s (cid %s) answered non-JSON: %r"
                            % (method, cid[:8], raw[:80]))
        if not isinstance(obj, dict):
            raise CallError("%s (cid %s) answered JSON %s, not an object"
                            % (method, cid[:8], type(obj).__name__))
        self._remember_tokens(obj)
        return obj

    def _remember_tokens(self, value):
        """Make sure no token from a reply can reach the output in full."""
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str) and TOKENISH_KEY_RE.search(key):
                    self.tap.add_secret(item)
                else:
                    self._remember_tokens(item)
        elif isinstance(value, list):
            for item in value:
                self._remember_tokens(item)

    def call(self, method, request, timeout=CALL_TIMEOUT):
        """Call a Microsoft-protocol method with a JSON-serialisable object or a
        raw request string; return the reply parsed as a JSON object."""
        cid = str(uuid.uuid4())
        values = self.dbus_call(MS_BUS_NAME, MS_PATH, MS_IFACE, method, "sss",
                                (PROTOCOL_VERSION, cid, self.encode(request)), timeout)
        if len(values) != 1:
            raise CallError("%s returned %d values, expected 1" % (method, len(values)))
        return self.parse(method, values[0], cid)

    def call_async(self, method, request, timeout):
        """Start a Microsoft-protocol call; returns a state dict whose 'done'
        becomes true when it answers ('reply' = parsed object, or 'error' =
        text)."""
        cid = str(uuid.uuid4())
        state = {"done": False, "reply": None, "error": None, "at": None, "cid": cid}

        def on_reply(*values):
            state["at"] = time.monotonic()
            try:
                if len(values) != 1:
                    raise CallError("%s returned %d values" % (method, len(values)))
                state["reply"] = self.parse(method, values[0], cid)
            except CallError as exc:
                state["error"] = str(exc)
            state["done"] = True

        def on_error(exc):
            state["at"] = time.monotonic()
            state["error"] = describe_dbus_error(exc)
            state["done"] = True

        self.bus.call_async(MS_BUS_NAME, MS_PATH, MS_IFACE, method, "sss",
                            (PROTOCOL_VERSION, cid, self.encode(request)),
                            on_reply, on_error, timeout=timeout)
        return state

    # ---- native interface --------------------------------------------------

    def native_sign_in(self, client_id, username, password):
        values = self.dbus_call(NATIVE_BUS_NAME, NATIVE_PATH, NATIVE_IFACE,
                                "SignInWithPassword", "sssas",
                                (client_id, username, password,
                                 dbus.Array(NATIVE_SCOPES, signature="s")))
        result = unwrap(values[0]) if values else None
        if not isinstance(result, dict):
            raise CallError("SignInWithPassword returned %r" % type(result).__name__)
        self._remember_tokens(result)
        return result

    def native_sign_out(self, client_id, account_id=""):
        values = self.dbus_call(NATIVE_BUS_NAME, NATIVE_PATH, NATIVE_IFACE, "SignOut",
                                "ssa{sv}", (client_id, account_id,
                                            dbus.Dictionary({}, signature="sv")))
        return unwrap(values[0]) if values else None

    def native_current(self, client_id):
        values = self.dbus_call(NATIVE_BUS_NAME, NATIVE_PATH, NATIVE_IFACE,
                                "GetCurrentAccount", "s", (client_id,))
        if len(values) != 2:
            raise CallError("GetCurrentAccount returned %d values, expected 2" % len(values))
        return unwrap(values[0]), unwrap(values[1])

    # ---- request builders --------------------------------------------------

    def echo_account(self, acct=None):
        """The account object as Microsoft's library echoes it back."""
        if acct is None:
            acct = self.need_account()
        echoed = dict(acct)
        echoed.update({"alternativeAccountId": "", "homeEnvironment": "",
                       "middleName": "", "passwordChangeUrl": ""})
        return echoed

    def auth_params(self, client_id, account, authority=AUTHORITY_COMMON,
                    scopes=("User.Read",), username=None, authorization_type=1):
        return {
            "account": account,
            "additionalQueryParametersForAuthorization": {},
            "authority": authority,
            "authorizationType": authorization_type,
            "clientId": client_id,
            "decodedClaims": "",
            "isTestMode": False,
            "redirectUri": client_id,
            "requestedScopes": list(scopes),
            "username": self.args.username if username is None else username,
            "uxContextHandle": -1,
        }

    def silent_request(self, client_id, **kwargs):
        account = kwargs.pop("account", None)
        if account is None:
            account = self.echo_account()
        return {"authParameters": self.auth_params(client_id, account, **kwargs)}

    def need_account(self):
        if self.acct is None:
            raise Skip("no account object (getAccounts gave none)")
        return self.acct

    # ---- HTTP ----------------------------------------------------------------

    def me_status(self, access_token):
        """Status of GET {idp}/v1.0/me with the token (or an error text)."""
        url = self.args.idp_base_url.rstrip("/") + "/v1.0/me"
        request = urllib.request.Request(url, headers={"Authorization": "Bearer " + access_token})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=HTTP_TIMEOUT) as response:
                response.read()
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except Exception as exc:
            return "%s: %s" % (type(exc).__name__, exc)

    def me_problems(self, resp):
        btr = resp.get("brokerTokenResponse") or {}
        token = btr.get("accessToken") if isinstance(btr, dict) else None
        if not isinstance(token, str) or not token:
            return ["no access token to try"]
        status = self.me_status(token)
        if status != 200:
            return ["GET /v1.0/me with token %s answered %s" % (short(token), status)]
        return []

    # ======================================================================
    # The checks
    # ======================================================================

    def run_all(self):
        for step in (self.precondition, self.s01_ping_introspect, self.s02_version,
                     self.s03_get_accounts_empty, self.s04_silent_nobody,
                     self.s05_native_sign_in, self.s06_get_accounts,
                     self.s07_silent_token, self.s08_silent_variants,
                     self.s09_silent_sign_in, self.s10_default_scope,
                     self.s11_foreign_tenant, self.s12_other_user,
                     self.s13_unsupported, self.s14_malformed,
                     self.s15_cancel_empty, self.s16_interactive_cancel,
                     self.s17_remove_account, self.s18_after_native_sign_out):
            try:
                step()
            except Exception as exc:  # a bug in a step must not stop the run
                self.tap.check(False, "%s ran to completion" % step.__name__,
                               "internal error: %s: %s" % (type(exc).__name__, exc))

    # ---- 0 ----------------------------------------------------------------

    def precondition(self):
        def fn():
            current, _previous = self.native_current(self.args.client_id)
            if current:
                return "native GetCurrentAccount names %r" % current.get("username")
            return []
        self.tap.run("0. precondition: native GetCurrentAccount(A) names nobody", fn)

    # ---- 1 ----------------------------------------------------------------

    def s01_ping_introspect(self):
        t = self.tap

        def ping():
            self.dbus_call(MS_BUS_NAME, MS_PATH, "org.freedesktop.DBus.Peer", "Ping", "", ())
        t.run("1. org.freedesktop.DBus.Peer.Ping on %s answers" % MS_PATH, ping)

        node = {}

        def introspect():
            values = self.dbus_call(MS_BUS_NAME, MS_PATH, "org.freedesktop.DBus.Introspectable",
                                    "Introspect", "", ())
            xml = str(values[0]) if values else ""
            try:
                root = ET.fromstring(xml)
            except ET.ParseError as exc:
                return "Introspect reply is not XML (%s)" % exc
            iface = None
            for element in root.findall("interface"):
                if element.get("name") == MS_IFACE:
                    iface = element
            if iface is None:
                return "Introspect XML has no interface %s" % MS_IFACE
            node["iface"] = iface
            names = {m.get("name") for m in iface.findall("method")}
            missing = [m for m in MS_METHODS if m not in names]
            return ["Introspect XML lacks methods %s" % ", ".join(missing)] if missing else []
        t.run("1. Introspect answers XML naming all eight methods of %s" % MS_IFACE,
              introspect)

        def signatures():
            if "iface" not in node:
                raise Skip("no introspection data")
            problems = []
            for method in node["iface"].findall("method"):
                if method.get("name") not in MS_METHODS:
                    continue
                ins = [x.get("type") for x in method.findall("arg")
                       if x.get("direction", "in") == "in"]
                outs = [x.get("type") for x in method.findall("arg")
                        if x.get("direction") == "out"]
                if ins != ["s", "s", "s"] or outs != ["s"]:
                    problems.append("%s is (%s) -> (%s)" % (method.get("name"), "".join(
                        t or "?" for t in ins), "".join(t or "?" for t in outs)))
            return problems
        t.run("1. introspected methods all have signature (sss) -> s", signatures)

    # ---- 2 ----------------------------------------------------------------

    def s02_version(self):
        for label, request in (("msalCppVersion", {"msalCppVersion": "1.28.0"}),
                               ("clientId", {"clientId": self.args.client_id})):
            def fn(request=request):
                resp = self.call("getLinuxBrokerVersion", request)
                version = resp.get("linuxBrokerVersion")
                if not isinstance(version, str) or not VERSION_RE.match(version):
                    return "linuxBrokerVersion is %r, expected a string X.Y.Z" % (version,)
                return []
            self.tap.run("2. getLinuxBrokerVersion {%s} answers linuxBrokerVersion X.Y.Z"
                         % label, fn)

    # ---- 3 ----------------------------------------------------------------

    def s03_get_accounts_empty(self):
        a = self.args
        variants = (("a UUID", str(uuid.uuid4())), ("the client id", a.client_id),
                    ("urn:ietf:oob", "urn:ietf:oob"), ("absent", None))
        for label, redirect in variants:
            def fn(redirect=redirect):
                request = {"clientId": a.client_id}
                if redirect is not None:
                    request["redirectUri"] = redirect
                resp = self.call("getAccounts", request)
                if resp.get("accounts") != [] or "error" in resp:
                    return "expected {\"accounts\": []}, got %s" % brief_json(resp)
                return []
            self.tap.run("3. getAccounts with redirectUri %s, nobody signed in: "
                         "{\"accounts\": []}" % label, fn)

    # ---- 4 ----------------------------------------------------------------

    def s04_silent_nobody(self):
        def fn():
            request = {"authParameters": self.auth_params(self.args.client_id, None,
                                                          username="")}
            resp = self.call("acquireTokenSilently", request)
            problems, _where = require_error(resp, (ST_INTERACTION_REQUIRED,
                                                    ST_ACCOUNT_NOT_FOUND),
                                             "brokerTokenResponse")
            return problems
        self.tap.run("4. acquireTokenSilently with nobody signed in: brokerTokenResponse.error "
                     "with five keys, status 2 or 16", fn)

    # ---- 5 ----------------------------------------------------------------

    def s05_native_sign_in(self):
        a = self.args
        t = self.tap

        def subscribe():
            self.subscribe()
        t.run("5. subscribe to native AccountChanged", subscribe)

        mark = len(self.events)
        state = {}

        def sign_in():
            result = self.native_sign_in(a.client_id, a.username, a.password)
            state["at_reply"] = self.events_at_last_reply
            problems = []
            if not isinstance(result.get("accessToken"), str) or not result.get("accessToken"):
                problems.append("result has no accessToken")
            acct = result.get("account")
            if not isinstance(acct, dict):
                return problems + ["result has no account dict"]
            self.native_account = acct
            if not same_user(acct.get("username"), a.username):
                problems.append("account.username is %r" % acct.get("username"))
            ident, tid = acct.get("identifier"), acct.get("tenantId")
            if not isinstance(ident, str) or not isinstance(tid, str) \
                    or not ident.endswith("." + tid):
                problems.append("account.identifier %r is not <oid>.<tenantId %r>" % (ident, tid))
            return problems
        t.run("5. native SignInWithPassword(A, U) signs U in", sign_in)

        def signal():
            if "at_reply" not in state:
                raise Skip("the sign-in failed")
            signed_in = [e for e in self.events[mark:state["at_reply"]]
                         if e["reason"] == "signed-in"]
            if len(signed_in) != 1:
                # One round trip, to tell "late" from "missing".
                self.native_current(a.client_id)
                later = [e for e in self.events[mark:] if e["reason"] == "signed-in"]
                return ("%d AccountChanged signed-in before the reply (%d after a further "
                        "round trip), expected exactly 1"
                        % (len(signed_in), len(later)))
            current = signed_in[0]["current"]
            if not same_user(current.get("username"), a.username):
                return "AccountChanged current names %r, not U" % current.get("username")
            return []
        t.run("5. exactly one AccountChanged(signed-in) naming U arrived before the "
              "SignInWithPassword reply", signal)

    # ---- 6 ----------------------------------------------------------------

    def s06_get_accounts(self):
        a = self.args
        found = {}
        for label, client in (("A", a.client_id), ("B", a.other_client_id)):
            def fn(client=client, label=label):
                resp = self.call("getAccounts", {"clientId": client, "redirectUri": client})
                accounts = resp.get("accounts")
                if not isinstance(accounts, list):
                    return "no accounts list in %s" % brief_json(resp)
                if len(accounts) != 1:
                    return "%d accounts, expected exactly 1: %s" % (len(accounts),
                                                                    brief_json(resp))
                problems = account_problems(accounts[0], a.username)
                if isinstance(accounts[0], dict):
                    # Keep it even when imperfect, so that later checks still run.
                    found[label] = accounts[0]
                    if self.acct is None:
                        self.acct = accounts[0]
                return problems
            self.tap.run("6. getAccounts for client %s: exactly one account with every "
                         "documented key, right types and values" % label, fn)

        def consistent():
            if "A" not in found or "B" not in found:
                raise Skip("a getAccounts call gave no account")
            if found["A"].get("homeAccountId") != found["B"].get("homeAccountId"):
                return "client A sees %r, client B sees %r" % (
                    found["A"].get("homeAccountId"), found["B"].get("homeAccountId"))
            return []
        self.tap.run("6. clients A and B see the same account (shared device)", consistent)

        def matches_native():
            acct = self.need_account()
            native = self.native_account
            if not native:
                raise Skip("no native account (sign-in failed)")
            problems = []
            if acct.get("homeAccountId") != native.get("identifier"):
                problems.append("homeAccountId %r != native identifier %r"
                                % (acct.get("homeAccountId"), native.get("identifier")))
            if acct.get("realm") != native.get("tenantId"):
                problems.append("realm %r != native tenantId %r"
                                % (acct.get("realm"), native.get("tenantId")))
            if "environment" in native and acct.get("environment") != native.get("environment"):
                problems.append("environment %r != native environment %r"
                                % (acct.get("environment"), native.get("environment")))
            return problems
        self.tap.run("6. the account matches the native account (homeAccountId = identifier, "
                     "realm = tenantId, environment)", matches_native)

    # ---- 7 ----------------------------------------------------------------

    def s07_silent_token(self):
        a = self.args
        state = {}

        def fn():
            acct = self.need_account()
            resp = self.call("acquireTokenSilently",
                             self.silent_request(a.other_client_id))
            state["resp"] = resp
            return token_response_problems(resp, acct.get("homeAccountId"))
        self.tap.run("7. acquireTokenSilently for client B with the echoed account: a complete "
                     "brokerTokenResponse (types, ms expiry, idToken, grantedScopes, account)",
                     fn)

        def me():
            if "resp" not in state:
                raise Skip("no token response")
            return self.me_problems(state["resp"])
        self.tap.run("7. GET /v1.0/me with that access token answers 200", me)

    # ---- 8 ----------------------------------------------------------------

    def s08_silent_variants(self):
        a = self.args

        def top_level():
            acct = self.need_account()
            request = self.silent_request(a.other_client_id)
            request["account"] = self.echo_account()
            resp = self.call("acquireTokenSilently", request)
            return token_response_problems(resp, acct.get("homeAccountId"))
        self.tap.run("8. acquireTokenSilently with account also at the top level: a token",
                     top_level)

        def with_authority(kind):
            def fn():
                acct = self.need_account()
                authority = AUTHORITY_HOST + "/" + (acct.get("realm") if kind == "realm"
                                                    else kind)
                resp = self.call("acquireTokenSilently",
                                 self.silent_request(a.other_client_id, authority=authority))
                return token_response_problems(resp, acct.get("homeAccountId"))
            return fn
        self.tap.run("8. acquireTokenSilently with authority .../<realm>: a token",
                     with_authority("realm"))
        self.tap.run("8. acquireTokenSilently with authority .../organizations: a token",
                     with_authority("organizations"))

    # ---- 9 ----------------------------------------------------------------

    def s09_silent_sign_in(self):
        a = self.args

        def fn():
            params = self.auth_params(a.other_client_id, None, username="")
            params["isSignIn"] = True
            resp = self.call("acquireTokenSilently", {"authParameters": params})
            home = self.acct.get("homeAccountId") if self.acct else None
            problems = token_response_problems(resp, home)
            btr = resp.get("brokerTokenResponse")
            if isinstance(btr, dict) and isinstance(btr.get("account"), dict):
                if not same_user(btr["account"].get("username"), a.username):
                    problems.append("token is for %r, not U" % btr["account"].get("username"))
            return problems
        self.tap.run("9. silent sign-in (account null, username \"\", isSignIn true) for "
                     "client B: a token for U", fn)

    # ---- 10 ---------------------------------------------------------------

    def s10_default_scope(self):
        a = self.args
        state = {}

        def fn():
            acct = self.need_account()
            resp = self.call("acquireTokenSilently",
                             self.silent_request(a.client_id, scopes=(GRAPH_DEFAULT_SCOPE,)))
            state["resp"] = resp
            return token_response_problems(resp, acct.get("homeAccountId"), scope=None)
        self.tap.run("10. acquireTokenSilently for client A with scope %s: a token"
                     % GRAPH_DEFAULT_SCOPE, fn)

        def me():
            if "resp" not in state:
                raise Skip("no token response")
            return self.me_problems(state["resp"])
        self.tap.run("10. GET /v1.0/me with the .default token answers 200", me)

    # ---- 11 ---------------------------------------------------------------

    def s11_foreign_tenant(self):
        def fn():
            self.need_account()
            authority = "%s/%s" % (AUTHORITY_HOST, uuid.uuid4())
            resp = self.call("acquireTokenSilently",
                             self.silent_request(self.args.other_client_id,
                                                 authority=authority))
            return require_error(resp, (ST_AUTHORITY_UNTRUSTED,), "brokerTokenResponse")[0]
        self.tap.run("11. acquireTokenSilently with an authority naming another tenant: "
                     "error status 11", fn)

    # ---- 12 ---------------------------------------------------------------

    def s12_other_user(self):
        a = self.args

        def fn():
            acct = self.need_account()
            oid, tid = str(uuid.uuid4()), str(uuid.uuid4())
            client_info = base64.urlsafe_b64encode(
                json.dumps({"uid": oid, "utid": tid}).encode()).decode().rstrip("=")
            other = {"environment": acct.get("environment", ""),
                     "homeAccountId": "%s.%s" % (oid, tid), "localAccountId": oid,
                     "realm": tid, "username": a.other_username, "name": "Other User",
                     "givenName": "Other", "familyName": "User", "passwordExpiry": 0,
                     "clientInfo": client_info}
            resp = self.call("acquireTokenSilently",
                             self.silent_request(a.other_client_id,
                                                 account=self.echo_account(other),
                                                 username=a.other_username))
            return require_error(resp, (ST_ACCOUNT_NOT_FOUND,), "brokerTokenResponse")[0]
        self.tap.run("12. shared mode: acquireTokenSilently for client B naming another user's "
                     "account: error status 16 (AccountNotFound)", fn)

    # ---- 13 ---------------------------------------------------------------

    def s13_unsupported(self):
        a = self.args
        sso_url = "https://login.microsoftonline.com/"

        def prt_request():
            acct = self.echo_account() if self.acct else None
            params = self.auth_params(a.client_id, acct, authorization_type=8)
            params["ssoUrl"] = sso_url
            return {"account": acct, "authParameters": params, "ssoUrl": sso_url,
                    "mamEnrollment": False}

        for method, build in (("acquirePrtSsoCookie", prt_request),
                              ("generateSignedHttpRequest",
                               lambda: {"clientId": a.client_id, "popParams": {}})):
            where = {}

            def fn(method=method, build=build, where=where):
                resp = self.call(method, build())
                problems, where["found"] = require_error(
                    resp, (ST_INCORRECT_CONFIGURATION,), "either")
                return problems

            def what(method=method, where=where):
                return ("13. %s: a JSON reply with an error object (five keys, status 9) "
                        "[error at %s]" % (method, where.get("found") or "-"))
            self.tap.run(what, fn)

    # ---- 14 ---------------------------------------------------------------

    def s14_malformed(self):
        a = self.args
        t = self.tap

        def base(method):
            acct = self.echo_account() if self.acct else None
            if method == "acquireTokenSilently":
                return {"authParameters": self.auth_params(a.other_client_id, acct)}
            if method == "acquireTokenInteractively":
                params = self.auth_params(a.client_id, None, authorization_type=6)
                params["prompt"] = "select_account"
                return {"authParameters": params}
            if method == "getAccounts":
                return {"clientId": a.client_id, "redirectUri": a.client_id}
            return {"clientId": a.client_id, "account": acct}  # removeAccount

        def token_method(method):
            return method in ("acquireTokenSilently", "acquireTokenInteractively")

        def scopes_as_string(method):
            request = base(method)
            request["authParameters"]["requestedScopes"] = "User.Read"
            return request

        def client_id_number(method):
            request = base(method)
            target = request["authParameters"] if token_method(method) else request
            target["clientId"] = 12345
            return request

        def client_id_missing(method):
            request = base(method)
            target = request["authParameters"] if token_method(method) else request
            del target["clientId"]
            return request

        def one_mib(method):
            # A well-formed request padded with an ignorable key to just over 1 MiB.
            request = base(method)
            request["padding"] = ""
            size = len(json.dumps(request))
            request["padding"] = "x" * (1024 * 1024 + 1 - size)
            raw = json.dumps(request)
            assert len(raw) == 1024 * 1024 + 1
            return raw

        cases = (
            ("not json", lambda m: "not json"),
            ("[]", lambda m: "[]"),
            ("\"a string\"", lambda m: "\"a string\""),
            ("{\"authParameters\": \"x\"}", lambda m: {"authParameters": "x"}),
            ("requestedScopes as a string", scopes_as_string),
            ("clientId as a number", client_id_number),
            ("clientId missing", client_id_missing),
            ("request_json of 1 MiB + 1 byte", one_mib),
        )
        # removeAccount last: a server that wrongly accepts one of these would
        # remove the account, and the later methods' answers would mean less.
        for method in ("acquireTokenSilently", "getAccounts", "acquireTokenInteractively",
                       "removeAccount"):
            for label, build in cases:
                if label.startswith("requestedScopes") and not token_method(method):
                    # The document says unknown keys are ignored, and these
                    # methods take no requestedScopes: nothing malformed to send.
                    continue
                where = {}

                def fn(method=method, build=build, where=where):
                    resp = self.call(method, build(method))
                    problems, where["found"] = require_error(
                        resp, (ST_API_CONTRACT_VIOLATION,), "either")
                    return problems

                def what(method=method, label=label, where=where):
                    return ("14. %s with %s: JSON reply with an error object, status 6 "
                            "[error at %s]" % (method, label, where.get("found") or "-"))
                t.run(what, fn)

        ok_accounts = t.run("14. afterwards getAccounts for A still lists U",
                            self._lists_user)
        ok_native = t.run("14. afterwards native GetCurrentAccount(A) still names U",
                          self._native_names_user)
        if not (ok_accounts and ok_native):
            self.recover()

    def _lists_user(self):
        resp = self.call("getAccounts", {"clientId": self.args.client_id,
                                         "redirectUri": self.args.client_id})
        accounts = resp.get("accounts")
        if not isinstance(accounts, list) or not any(
                isinstance(x, dict) and same_user(x.get("username"), self.args.username)
                for x in accounts):
            return "U not listed: %s" % brief_json(resp)
        return []

    def _native_names_user(self):
        current, _previous = self.native_current(self.args.client_id)
        if not same_user(current.get("username"), self.args.username):
            return "current account is %r" % current.get("username")
        return []

    def recover(self):
        """Sign U in again natively so that the later checks can still run."""
        self.tap.comment("recovering: signing U in again natively")
        try:
            current, _ = self.native_current(self.args.client_id)
            if current and not same_user(current.get("username"), self.args.username):
                self.native_sign_out(self.args.client_id)
            if not same_user(current.get("username"), self.args.username):
                self.native_sign_in(self.args.client_id, self.args.username, self.args.password)
            resp = self.call("getAccounts", {"clientId": self.args.client_id})
            accounts = resp.get("accounts") or []
            if len(accounts) == 1 and isinstance(accounts[0], dict):
                self.acct = accounts[0]
        except Exception as exc:
            self.tap.comment("recovery failed: %s" % exc)

    # ---- 15 ---------------------------------------------------------------

    def s15_cancel_empty(self):
        def fn():
            self.call("cancelInteractiveFlow", {})  # raises unless a JSON object
            return []
        self.tap.run("15. cancelInteractiveFlow with {} answers a JSON object", fn)

    # ---- 16 ---------------------------------------------------------------

    def s16_interactive_cancel(self):
        a = self.args
        t = self.tap
        params = {"clientId": a.client_id, "redirectUri": a.client_id,
                  "authority": AUTHORITY_COMMON, "requestedScopes": ["User.Read"],
                  "authorizationType": 6, "prompt": "select_account",
                  "username": a.username}
        pending = self.call_async("acquireTokenInteractively", {"authParameters": params},
                                  INTERACTIVE_TIMEOUT)
        cancel_problems = []
        attempts = 0
        first_cancel = last_cancel = None
        while attempts < CANCEL_RETRIES and not pending["done"]:
            # Give the broker a moment to start the flow (a GLib timeout).
            run_until(lambda: pending["done"], CANCEL_RETRY_DELAY_MS / 1000.0)
            if pending["done"]:
                break
            attempts += 1
            last_cancel = time.monotonic()
            if first_cancel is None:
                first_cancel = last_cancel
            try:
                self.call("cancelInteractiveFlow", {"clientId": a.client_id})
            except CallError as exc:
                cancel_problems.append("attempt %d: %s" % (attempts, exc))
        if last_cancel is not None:
            run_until(lambda: pending["done"],
                      max(0.0, last_cancel + CANCEL_ANSWER_WITHIN - time.monotonic()))

        t.check(attempts > 0 and not cancel_problems,
                "16. cancelInteractiveFlow {\"clientId\": A} answers a JSON object "
                "(%d attempt(s))" % attempts,
                "; ".join(cancel_problems) if cancel_problems else
                "the interactive call answered before any cancel")

        def answered():
            if not pending["done"]:
                return ("the interactive call did not answer within %.0f s of the last cancel"
                        % CANCEL_ANSWER_WITHIN)
            if pending["error"]:
                return pending["error"]
            if first_cancel is None:
                return "it answered before being cancelled: %s" % brief_json(pending["reply"])
            if pending["at"] - last_cancel > CANCEL_ANSWER_WITHIN:
                return "it answered %.1f s after the last cancel" % (pending["at"] - last_cancel)
            return require_error(pending["reply"], (ST_USER_CANCELED, ST_APPLICATION_CANCELED),
                                 "brokerTokenResponse")[0]
        elapsed = ""
        if pending["done"] and first_cancel is not None:
            elapsed = " (%.1f s after the first cancel)" % (pending["at"] - first_cancel)
        t.run("16. cancelled acquireTokenInteractively answers within %.0f s with "
              "brokerTokenResponse.error status 7 or 8%s" % (CANCEL_ANSWER_WITHIN, elapsed),
              answered)

        if not pending["done"]:
            # Do not leave a flow running into the next checks.
            run_until(lambda: pending["done"], INTERACTIVE_TIMEOUT)

    # ---- 17 ---------------------------------------------------------------

    def s17_remove_account(self):
        a = self.args
        t = self.tap
        state = {}

        def remove():
            acct = self.echo_account()
            state["mark"] = len(self.events)
            resp = self.call("removeAccount", {"clientId": a.client_id, "account": acct})
            state["removed"] = True
            err, where = find_error(resp)
            if err is not None:
                return "the reply carries an error at %s: %s" % (where, brief_json(err))
            return []
        t.run("17. removeAccount {clientId A, account} answers a JSON object without error",
              remove)

        def signal():
            if "mark" not in state:
                raise Skip("removeAccount was not called")
            # One round trip: every signal sent before its reply is now delivered.
            current, _previous = self.native_current(a.client_id)
            state["current"] = current
            since = self.events[state["mark"]:]
            signed_out = [e for e in since if e["reason"] == "signed-out"]
            if len(signed_out) != 1:
                return "%d AccountChanged(signed-out) since removeAccount (reasons: %s)" % (
                    len(signed_out), ", ".join(e["reason"] for e in since) or "none")
            return []
        t.run("17. exactly one AccountChanged(signed-out) was received since removeAccount",
              signal)

        def native_nobody():
            if "current" not in state:
                raise Skip("GetCurrentAccount failed")
            if state["current"]:
                return "native GetCurrentAccount still names %r" % state["current"].get(
                    "username")
            return []
        t.run("17. native GetCurrentAccount(A) then names nobody", native_nobody)

        def empty():
            resp = self.call("getAccounts", {"clientId": a.client_id,
                                             "redirectUri": a.client_id})
            if resp.get("accounts") != [] or "error" in resp:
                return "expected {\"accounts\": []}, got %s" % brief_json(resp)
            return []
        t.run("17. getAccounts for A then answers {\"accounts\": []}", empty)

    # ---- 18 ---------------------------------------------------------------

    def s18_after_native_sign_out(self):
        a = self.args
        t = self.tap
        old = self.acct

        def sign_in():
            result = self.native_sign_in(a.client_id, a.username, a.password)
            acct = result.get("account") or {}
            if not same_user(acct.get("username"), a.username):
                return "signed in %r" % acct.get("username")
            return []
        t.run("18. native SignInWithPassword(A, U) again", sign_in)

        def sign_out():
            result = self.native_sign_out(a.client_id, "")
            if not isinstance(result, dict):
                return "SignOut returned %r" % type(result).__name__
            current, _previous = self.native_current(a.client_id)
            if current:
                return "GetCurrentAccount still names %r" % current.get("username")
            return []
        t.run("18. native SignOut(A, \"\", {}) signs the device out", sign_out)

        def silent():
            if old is None:
                raise Skip("no account object (getAccounts gave none)")
            resp = self.call("acquireTokenSilently",
                             self.silent_request(a.other_client_id,
                                                 account=self.echo_account(old)))
            return require_error(resp, (ST_INTERACTION_REQUIRED, ST_ACCOUNT_NOT_FOUND),
                                 "brokerTokenResponse")[0]
        t.run("18. after native sign-out, acquireTokenSilently for B with the old account: "
              "error status 2 or 16", silent)


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Independent test client of Microsoft's Linux identity-broker D-Bus "
                    "protocol (com.microsoft.identity.Broker1), written from "
                    "shared/design/microsoft-broker1-protocol.md. Prints TAP-like lines; "
                    "exit 0 = all checks passed, 1 = some failed, 2 = bad usage.")
    parser.add_argument("--address", required=True,
                        help="D-Bus address of the private bus the broker is on")
    parser.add_argument("--idp-base-url", required=True,
                        help="base URL of the OpenID Connect simulator (serves /v1.0/me)")
    parser.add_argument("--username", required=True, help="user U")
    parser.add_argument("--password", required=True, help="U's password")
    parser.add_argument("--other-username", required=True, help="another user U2")
    parser.add_argument("--other-password", required=True,
                        help="U2's password (accepted for symmetry; U2 is never signed in)")
    parser.add_argument("--client-id", required=True, help="client (application) id A")
    parser.add_argument("--other-client-id", required=True, help="client (application) id B")
    args = parser.parse_args(argv)  # exits 2 on bad usage
    for name in ("address", "idp_base_url", "username", "password", "other_username",
                 "client_id", "other_client_id"):
        if not getattr(args, name):
            parser.error("--%s must not be empty" % name.replace("_", "-"))
    if args.client_id == args.other_client_id:
        parser.error("--client-id and --other-client-id must differ")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    tap = Tap([args.password, args.other_password])
    client = Client(args, tap)
    try:
        client.connect()
    except Exception as exc:
        tap.check(False, "connect to the bus at --address", "%s: %s" % (type(exc).__name__, exc))
        return tap.finish()
    client.run_all()
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
