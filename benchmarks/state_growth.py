#!/usr/bin/python3
"""What a change costs when the broker knows many apps: a new clientId's first GetCurrentAccount
(one change written: a line in state.journal) beside a known clientId's (nothing written), and,
as the reference, what every change cost before the journal: the whole state file written to a
temporary file, renamed over state.json and fsynced with its directory, in this same run.

    /usr/bin/python3 benchmarks/state_growth.py BIN_DIR [CLIENTS] [CALLS]

Needs dbus-python (python3-dbus, which `make deps` installs) and dbus-daemon. Prints one JSON
line: microseconds (p50, p90) for each, and the bytes written per change.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import dbus

HERE = os.path.dirname(os.path.abspath(__file__))
bin_dir = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 300

account = {"username": "alice@contoso.example", "identifier": "oid-alice.tenant", "tenantId": "tenant",
           "environment": "login.example", "name": "Alice"}
# Apps holding a refresh token each (--token-storage plaintext-file): none of them is a bystander
# the client limit would forget.
state = {"version": 2, "deviceId": "0f8e1c2d-3b4a-4c5d-8e6f-7a8b9c0d1e2f", "current": account,
         "accounts": {account["identifier"]: account},
         "clients": {f"app-{i:05d}": {"lastSeen": account["identifier"], "account": account["identifier"],
                                      "refreshToken": f"rt-{i:05d}-" + "r" * 40} for i in range(count)}}
tmp = tempfile.mkdtemp(prefix="state-growth-")
state_dir = os.path.join(tmp, "state")
os.makedirs(state_dir, mode=0o700)
state_bytes = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
with open(os.open(os.path.join(state_dir, "state.json"), os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
    f.write(state_bytes)


def spawn(cmd, ready):
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(ready) or ready in line:
            return process, line.strip()
    process.kill()
    sys.exit(f"{cmd[0]} did not print {ready!r}")


bus_process, address = spawn(["dbus-daemon", f"--config-file={HERE}/bus.conf", "--nofork", "--print-address=1"],
                             "unix:")
brokerd, _ = spawn([f"{bin_dir}/brokerd", "--address", address, "--device-mode", "shared", "--state-dir", state_dir,
                    "--token-storage", "plaintext-file", "--authority", "http://127.0.0.1:9/tenant/v2.0"],
                   "brokerd ready")
try:
    bus = dbus.bus.BusConnection(address)
    broker = dbus.Interface(bus.get_object("io.shareddevice.Broker1", "/io/shareddevice/Broker1"),
                            "io.shareddevice.Broker1")

    def timed(call):
        started = time.perf_counter()
        call()
        return (time.perf_counter() - started) * 1e6

    # Alternating, so that both see the same machine: a known app (nothing to write), a new one (a line).
    known, new = [], []
    journal = os.path.join(state_dir, "state.journal")
    journal_before = os.path.getsize(journal) if os.path.exists(journal) else 0
    for i in range(calls):
        known.append(timed(lambda: broker.GetCurrentAccount("app-00001")))
        new.append(timed(lambda: broker.GetCurrentAccount(f"newcomer-{i:05d}")))
    journal_after = os.path.getsize(journal) if os.path.exists(journal) else 0

    # The reference: the whole file, as each change was written before (temporary file, rename, fsync of both).
    whole = []
    reference = os.path.join(tmp, "reference.json")
    for _ in range(min(calls, 100)):
        def write():
            temporary = reference + ".tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, state_bytes)
            os.rename(temporary, reference)
            os.fsync(fd)
            os.close(fd)
            directory = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(directory)
            os.close(directory)
        whole.append(timed(write))
finally:
    brokerd.terminate()
    brokerd.wait(10)
    bus_process.terminate()


def summary(values):
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered)), "p90": round(ordered[int(len(ordered) * 0.9)])}


print(json.dumps({
    "clients": count, "calls": calls, "state_file_bytes": len(state_bytes),
    "known_client_us": summary(known), "new_client_us": summary(new),
    "journal_bytes_per_change": round((journal_after - journal_before) / calls, 1),
    "whole_file_write_us": summary(whole),
}))
