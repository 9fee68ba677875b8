#!/usr/bin/python3
"""Swaps a directory with a symbolic link, atomically and in a loop: the person at a kiosk
turning the administrator's clean-up against files elsewhere.

  swap_directory.py DIRECTORY LINK

LINK is a symbolic link (to a directory outside the home) beside DIRECTORY. Each turn exchanges
the two names (renameat2 with RENAME_EXCHANGE), so that DIRECTORY is a link half of the time and
the real directory the other half. Prints "swapping" once the first exchange is done, and goes
on until SIGTERM, after which the real directory is back at its name and it prints "stopped".
"""

import ctypes
import os
import signal
import sys

AT_FDCWD = -100
RENAME_EXCHANGE = 2

libc = ctypes.CDLL(None, use_errno=True)
directory, link = (os.fsencode(arg) for arg in sys.argv[1:3])
stopping = False


def stop(_signal, _frame):
    global stopping
    stopping = True


def exchange():
    if libc.renameat2(AT_FDCWD, directory, AT_FDCWD, link, RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        sys.exit(f"renameat2: {os.strerror(error)}")


signal.signal(signal.SIGTERM, stop)
exchange()
print("swapping", flush=True)
turns = 1
while not stopping:
    exchange()
    turns += 1
if os.path.islink(directory):
    exchange()
    turns += 1
print(f"stopped after {turns} exchanges", flush=True)
