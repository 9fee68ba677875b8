"""The kiosk of test_providers.py: the browser suite's private desktop (Tests/Browser/harness.py:
Xvfb, a private session bus with the real xdg-desktop-portal and its gtk backend, Chromium as the
default browser) with one Chromium driven by Selenium for everyone who comes to it, and a brokerd
in shared mode on that bus, which opens its pages through the portal's OpenURI into that Chromium.

`GlewlwydPages` is what a person does on glewlwyd's own pages there (its login page, a JavaScript
app): types a username and password, continues to the app, confirms the end of a session.
"""
import argparse
import os
import shutil
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Browser"))
import harness  # noqa: E402

# glewlwyd's cookies (glewlwyd.conf's session_key, and the oidc plugin's session-cookie-name): its
# login session, which may hold several people (allow_multiple_user_per_session), and the OpenID
# Connect session it keeps for RP-initiated logout.
SESSION_COOKIES = ("GLEWLWYD2_SESSION_ID", "GLEWLWYD_OIDC_SESSION")


class Kiosk:
    """The desktop, its Chromium and a brokerd on its bus; `close` stops them and puts this
    process's environment back (PrivateDesktop makes its own this process's, for Selenium)."""

    def __init__(self, broker_bin, server, broker_config, artifacts):
        self.saved_environ = dict(os.environ)
        self.desk = harness.Run(argparse.Namespace(broker_bin=broker_bin, artifacts=artifacts))
        try:
            self.desktop = harness.PrivateDesktop(self.desk)
            self.profile = self.desk.path("profiles", "kiosk")
            self.desktop.start(self.profile)
            harness.install_tripwire(self.desk)
            self.monitor = harness.BusMonitor(self.desk, self.desktop.address)
            self.portal_version = self.desktop.start_portal()
            self.browser = harness.Browser(self.desk, "kiosk", self.profile)
            self.broker = harness.Broker(self.desk, self.desktop, server, self.desk.path("state"),
                                         config=broker_config)
            self.ctl = harness.Brokerctl(self.desk)
        except BaseException:
            self.close()
            raise

    def close(self):
        """Stops everything, keeps the logs in the artifacts' logs/ and removes the rest."""
        self.desk.stop_all()
        logs = os.path.join(self.desk.artifacts, "logs")
        shutil.rmtree(logs, ignore_errors=True)
        os.makedirs(logs)
        for name in os.listdir(self.desk.directory):
            if name.endswith((".log", ".out", ".err", ".json", ".conf")):
                shutil.copy(self.desk.path(name), logs)
        shutil.rmtree(self.desk.directory, ignore_errors=True)
        os.environ.clear()
        os.environ.update(self.saved_environ)

    def started_by_broker(self, since):
        """The one-time start addresses brokerd handed the portal's OpenURI after the first `since` calls."""
        return [url for sender, url, _ in self.monitor.open_uri_calls()[since:]
                if sender == self.broker.unique_name and url and "/start/" in url]

    def session_cookies(self):
        """{name: value} of glewlwyd's session cookies Chromium holds with a value (glewlwyd ends
        one by setting it empty)."""
        return {c["name"]: c["value"] for c in self.browser.cookies()
                if c.get("name") in SESSION_COOKIES and c.get("value")}

    def tab(self, known, wanted, timeout, what):
        """A tab not in `known` whose address satisfies `wanted`; switches to it and returns its handle."""
        driver = self.browser.driver

        def find():
            for handle in driver.window_handles:
                if handle not in known:
                    driver.switch_to.window(handle)
                    if wanted(driver.current_url):
                        return handle
            return None

        return harness.wait_until(find, timeout, what, interval=0.1)

    def addresses(self, handles):
        """{handle: address} of these tabs (the current tab stays the current one)."""
        driver = self.browser.driver
        current = driver.current_window_handle
        found = {}
        for handle in handles:
            driver.switch_to.window(handle)
            found[handle] = driver.current_url
        driver.switch_to.window(current)
        return found


def query(url):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)


class GlewlwydPages:
    """glewlwyd's login page (login.html) in the kiosk's Chromium, as a person uses it. It is a
    JavaScript app: what it shows is read from the page once it has drawn it, each wait bounded."""

    def __init__(self, kiosk, server):
        self.kiosk = kiosk
        self.browser = kiosk.browser
        self.server = server
        self.login_page = server.base + "/login.html"

    def is_login_page(self, url, prompt):
        return url.startswith(self.login_page) and query(url).get("prompt") == [prompt]

    def element(self, xpath):
        from selenium.webdriver.common.by import By
        found = self.browser.driver.find_elements(By.XPATH, xpath)
        return found[0] if found and found[0].is_displayed() else None

    def wait_for(self, xpath, what, timeout=20):
        return harness.wait_until(lambda: self.element(xpath), timeout, what)

    def credentials_form(self, timeout=20):
        """The form asking for a username and a password (glewlwyd's "Please enter your login and
        password"): (username field, password field), or None if the page shows something else."""
        try:
            self.wait_for("//form[@id='passwordForm']//input[@id='password']", "glewlwyd's password field", timeout)
        except harness.Failure:
            return None
        username, password = self.element("//input[@id='username']"), self.element("//input[@id='password']")
        return (username, password) if username is not None and password is not None else None

    def prefilled(self):
        """What the login form shows before anyone types: the username field's value, the password
        field's, and whether it offers "Manage connected users" (people of glewlwyd's session in
        this browser)."""
        form = self.credentials_form()
        if form is None:
            return None
        return (form[0].get_attribute("value"), form[1].get_attribute("value"),
                self.element("//button[normalize-space()='Manage connected users']") is not None)

    def sign_in(self, person, at_consent=None):
        """Types the username and password and presses OK; once the page greets the person by name
        ("Hello Alice"), consents to the app where it asks ("Client access grant": the Open ID box is
        ticked already; "Grant access", after `at_consent()`); returns the Continue button."""
        username, password = self.credentials_form()
        username.clear()
        username.send_keys(person[0])
        password.send_keys(person[1])
        self.element("//button[@id='loginbut']").click()
        self.wait_for("//*[normalize-space()='Hello %s']" % person[0].title(), "glewlwyd's greeting of %s" % person[0])
        grant = "//button[normalize-space()='Grant access']"
        proceed = "//button[normalize-space()='Continue']"
        harness.wait_until(lambda: self.element(grant) or self.element(proceed), 20,
                           "glewlwyd's consent or its Continue button")
        if self.element(grant):
            if at_consent:
                at_consent()
            # The page draws the form again once glewlwyd took the consent (the scopes it does not
            # offer stay listed): glewlwyd's log says when it did.
            event = "User '%s' granted scope list" % person[0]
            before = self.server.logged(event)
            self.element(grant).click()
            harness.wait_until(lambda: self.server.logged(event) > before, 20, "glewlwyd's record of the consent")
        button = self.wait_for(proceed, "glewlwyd's Continue button")
        self.browser.driver.execute_script("arguments[0].scrollIntoView()", button)
        return button

    def end_session_shown(self):
        """The end-session page's question and its Logout button, once drawn."""
        self.wait_for("//*[normalize-space()='End session']", "glewlwyd's End session title")
        return self.wait_for("//button[normalize-space()='Logout']", "the end-session page's Logout button")

    def session_closed(self, timeout=20):
        """Whether the page says the session is closed ("You are disconnected")."""
        try:
            return bool(self.wait_for("//*[normalize-space()='You are disconnected']", "glewlwyd's Session closed",
                                      timeout))
        except harness.Failure:
            return False
