#!/usr/bin/env python3
"""Microsoft's own client library against brokerd: not part of `make test` (it needs PyPI and
WebKitGTK), a check to run by hand after changing the Microsoft broker protocol adapter.

Setup (once): apt-get install libwebkit2gtk-4.1-0 gnome-keyring;
python3 -m venv /tmp/msal && /tmp/msal/bin/pip install "msal[broker]"

Then, with DBUS_SESSION_BUS_ADDRESS naming a bus where brokerd runs with
--compat microsoft-broker1 in shared mode, someone is signed in, and an unlocked Secret Service
answers (MSALRuntime keeps its own cache there; gnome-keyring-daemon --unlock --components=secrets):

    /tmp/msal/bin/python Tests/Compatibility/msal_runtime_check.py CLIENT_ID TENANT_ID

It signs in silently (Microsoft's `signin_silently`: the device's account), acquires a token
silently for that account, and prints what came back. Exit status 0 when both worked.
"""
import sys

from msal import broker  # loads pymsalruntime, which talks to com.microsoft.identity.broker1


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    client_id, tenant = sys.argv[1], sys.argv[2]
    signed_in = broker._signin_silently(
        "https://login.microsoftonline.com/organizations", client_id, ["User.Read"]) or {}
    if "access_token" not in signed_in:
        print("not ok - signin_silently:", signed_in.get("error"), signed_in.get("_broker_status"))
        return 1
    claims = signed_in.get("id_token_claims", {})
    print("ok - signin_silently: %s (tid %s)" % (claims.get("preferred_username"), claims.get("tid")))
    silent = broker._acquire_token_silently(
        "https://login.microsoftonline.com/" + tenant, client_id, signed_in["_account_id"], ["User.Read"]) or {}
    if "access_token" not in silent:
        print("not ok - acquire_token_silently:", silent.get("error"), silent.get("_broker_status"))
        return 1
    print("ok - acquire_token_silently: scope %s, expires in %s s" % (silent.get("scope"), silent.get("expires_in")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
