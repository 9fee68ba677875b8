#!/usr/bin/python3
"""A second app's first token through single sign-on, beside a cached one, timed in one process.

    /usr/bin/python3 benchmarks/sso_first_token.py ADDRESS N USER PASSWORD SCOPE

Needs dbus-python (Debian's python3-dbus, which `make deps` installs for /usr/bin/python3).
Each of N rounds: mail-app signs USER in; calendar-app's first AcquireTokenSilent (its tokens
come through single sign-on: a token exchange at the provider); its second (from the cache);
mail-app signs the device out, which ends the grant. Prints one JSON line of microseconds.
"""
import json
import sys
import time

import dbus

address, rounds, user, password, scope = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
bus = dbus.bus.BusConnection(address)
broker = dbus.Interface(bus.get_object("io.shareddevice.Broker1", "/io/shareddevice/Broker1"), "io.shareddevice.Broker1")
options = dbus.Dictionary({}, signature="sv")


def timed(call):
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e6


first, cached = [], []
for _ in range(rounds):
    broker.SignInWithPassword("mail-app", user, password, [scope])
    first.append(timed(lambda: broker.AcquireTokenSilent("calendar-app", [scope], "", options)))
    cached.append(timed(lambda: broker.AcquireTokenSilent("calendar-app", [scope], "", options)))
    broker.SignOut("mail-app", "", options)
print(json.dumps({"first_us": first, "cached_us": cached}))
