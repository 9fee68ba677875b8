"""The kiosk's browser for test_providers.py, started by brokerd as $BROWSER with one URL: it
follows the redirects, and where glewlwyd sends it to its login page it does what a person does
there (glewlwyd's login API with the password, consent to the client's scope, then back to the
authorization request, as the login page's "Continue" does), and on its end-session page it
confirms the end of the session, as the person at the kiosk would. Its cookies are kept in a file
between runs, as a browser keeps its session; each page it was sent to is appended to a log.

Environment: KIOSK_COOKIES, KIOSK_LOG, KIOSK_PERSON ("username:password").
"""
import http.cookiejar
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def main(url):
    jar = http.cookiejar.LWPCookieJar(os.environ["KIOSK_COOKIES"])
    if os.path.exists(jar.filename):
        jar.load(ignore_discard=True)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect())
    username, password = os.environ["KIOSK_PERSON"].split(":", 1)
    log = open(os.environ["KIOSK_LOG"], "a")

    def send(method, address, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(address, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with opener.open(request, timeout=15) as response:
                return response.status, response.headers.get("Location")
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Location")

    authorization = None
    signed_in = False
    for _ in range(12):
        status, location = send("GET", url)
        log.write("%d %s\n" % (status, url))
        if location is None:
            break
        target = urllib.parse.urljoin(url, location)
        parts = urllib.parse.urlsplit(target)
        if parts.path.endswith("/auth"):
            authorization = target
        query = urllib.parse.parse_qs(parts.query)
        if parts.path.endswith("/login.html") and query.get("prompt") == ["end_session"]:
            # glewlwyd's end-session page asks the person to confirm; the person does.
            origin = "%s://%s" % (parts.scheme, parts.netloc)
            status, _ = send("DELETE", "%s/api/%s/session/%s" % (origin, query.get("plugin", ["oidc"])[0],
                                                                 query.get("sid", [""])[0]))
            log.write("end session confirmed: %d\n" % status)
            break
        if parts.path.endswith("/login.html") and authorization and not signed_in:
            origin = "%s://%s" % (parts.scheme, parts.netloc)
            client = urllib.parse.parse_qs(urllib.parse.urlsplit(authorization).query).get("client_id", [""])[0]
            scope = urllib.parse.parse_qs(urllib.parse.urlsplit(authorization).query).get("scope", ["openid"])[0]
            log.write("login page: signing in as %s\n" % username)
            send("POST", origin + "/api/auth/", {"username": username, "password": password})
            send("PUT", origin + "/api/auth/grant/" + urllib.parse.quote(client), {"scope": scope})
            signed_in = True
            url = authorization + "&g_continue"
            continue
        url = target
    jar.save(ignore_discard=True)
    log.close()


if __name__ == "__main__":
    main(sys.argv[1])
