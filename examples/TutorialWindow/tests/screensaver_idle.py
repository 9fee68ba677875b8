#!/usr/bin/python3
"""org.freedesktop.ScreenSaver's GetSessionIdleTime for a bare X server, on the session bus.

A desktop's screensaver serves this method (KDE's on X11; brokerd asks it while someone is
signed in), but a bare Xvfb has no desktop, so nothing on the bus does. This adapter is the one
piece that stands in, and it invents nothing: each answer is the X server's own idle time (how
long since its last input event), read through its MIT-SCREEN-SAVER extension with python3-xlib,
in milliseconds as KDE answers. Real input to that X server (a click with xdotool) is what makes
the person active.

One X connection for the whole run: a client that connects for each answer (xprintidle) would be
the server's only client at times, and an X server that loses its last client resets, idle time
included.

Usage: screensaver_idle.py  (DISPLAY and DBUS_SESSION_BUS_ADDRESS from the environment)
Prints "serving" once it owns the name; one line per answer on standard error.
"""
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib
from Xlib import display
from Xlib.ext import screensaver  # noqa: F401  (adds screensaver_query_info to windows)

NAME = "org.freedesktop.ScreenSaver"
# brokerd tries the freedesktop path first, then KDE's.
PATHS = ("/org/freedesktop/ScreenSaver", "/ScreenSaver")


class ScreenSaver(dbus.service.Object):
    def __init__(self, bus, path, root):
        super().__init__(bus, path)
        self.root = root

    @dbus.service.method(NAME, in_signature="", out_signature="u")
    def GetSessionIdleTime(self):
        milliseconds = self.root.screensaver_query_info().idle
        print("idle %d ms" % milliseconds, file=sys.stderr, flush=True)
        return dbus.UInt32(min(milliseconds, 0xFFFFFFFF))


def main():
    screen = display.Display()
    if not screen.has_extension("MIT-SCREEN-SAVER"):
        sys.exit("screensaver_idle.py: the X server has no MIT-SCREEN-SAVER extension")
    root = screen.screen().root
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    name = dbus.service.BusName(NAME, bus, do_not_queue=True)
    objects = [ScreenSaver(bus, path, root) for path in PATHS]
    print("serving", flush=True)
    try:
        GLib.MainLoop().run()
    finally:
        del objects, name


if __name__ == "__main__":
    main()
