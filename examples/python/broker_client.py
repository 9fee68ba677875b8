#!/usr/bin/python3
"""A client of the shared-device broker in Python, with none of this project's code.

Reads the device mode and this app's current and previous account, then waits for the broker's
AccountChanged signal and prints each one. It uses Debian's dbus-python and PyGObject (the GLib
main loop), which install on a fresh Debian 12 with:

    sudo apt-get install python3-dbus python3-gi

Usage:
    broker_client.py [--address BUS] [--client-id ID] [--count N] [--timeout SECONDS]

Prints (one line each, stable for scripts):
    device mode: shared
    current account: alice@contoso.example | none
    previous account: ... | none
    waiting for AccountChanged
    AccountChanged: signed-out current=none previous=alice@contoso.example
Exits 0 after N signals (default 1; 0 means wait forever), 1 when --timeout passes first.
"""

import argparse
import sys

import dbus
import dbus.mainloop.glib
from gi.repository import GLib

BUS_NAME = "io.shareddevice.Broker1"
OBJECT_PATH = "/io/shareddevice/Broker1"
INTERFACE = "io.shareddevice.Broker1"


def username(account):
    """The username of an account dictionary (a{sv}); an empty one means nobody."""
    return str(account.get("username", "")) or "none"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="the bus (default: the session bus)")
    parser.add_argument("--client-id", default="python-app")
    parser.add_argument("--count", type=int, default=1, help="signals to wait for; 0: forever")
    parser.add_argument("--timeout", type=float, default=0, help="seconds to wait; 0: no limit")
    args = parser.parse_args()

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(args.address) if args.address else dbus.SessionBus()
    broker = dbus.Interface(bus.get_object(BUS_NAME, OBJECT_PATH), INTERFACE)

    try:
        information = broker.GetDeviceInformation()
        current, previous = broker.GetCurrentAccount(args.client_id)
    except dbus.exceptions.DBusException as error:
        print(f"error: {error.get_dbus_name()}: {error.get_dbus_message()}", flush=True)
        return 1
    print(f"device mode: {information['deviceMode']}", flush=True)
    print(f"current account: {username(current)}", flush=True)
    print(f"previous account: {username(previous)}", flush=True)

    loop = GLib.MainLoop()
    seen = 0
    status = {"code": 0}

    def on_account_changed(current, previous, reason):
        nonlocal seen
        print(f"AccountChanged: {reason} current={username(current)} previous={username(previous)}", flush=True)
        seen += 1
        if args.count and seen >= args.count:
            loop.quit()

    def on_timeout():
        print(f"timed out after {args.timeout:g} s", flush=True)
        status["code"] = 1
        loop.quit()
        return False

    # sender_keyword-free match on the well-known name: the bus routes it to whoever owns the
    # name now, so a restarted broker is heard too.
    bus.add_signal_receiver(on_account_changed, signal_name="AccountChanged", dbus_interface=INTERFACE,
                            bus_name=BUS_NAME, path=OBJECT_PATH)
    # Round trip after AddMatch: once it returns, the match is in place.
    bus.get_object("org.freedesktop.DBus", "/org/freedesktop/DBus").GetId(dbus_interface="org.freedesktop.DBus")
    print("waiting for AccountChanged", flush=True)
    if args.timeout > 0:
        GLib.timeout_add(int(args.timeout * 1000), on_timeout)
    try:
        loop.run()
    except KeyboardInterrupt:
        pass
    return status["code"]


if __name__ == "__main__":
    sys.exit(main())
