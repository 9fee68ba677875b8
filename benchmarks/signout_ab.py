#!/usr/bin/env python3
"""Sign-out to the last of K subscribers, builds of brokerd compared in alternation.

    python3 benchmarks/signout_ab.py [--k 100] [--reps 10] [--rounds 15] NAME=BROKERD [NAME=BROKERD ...]

Each build gets a private bus of its own (its own dbus-daemon), signed in through one idp-sim (at
nice 19, as in run.py); the durable reference gets one too. Their sign-out runs alternate, and each
build's samples are pooled over the repetitions, so that two builds are compared over the same
minutes of this machine's noise: `make bench` compares brokerd with the reference, not brokerd
with itself. Prints the quartiles, the mean and the ratio to the reference, and the CPU each
round cost the build's process, its dbus-daemon and idp-sim. Needs `make bench` (or run.py) to
have built .build-bench. BENCHMARKS.md's run Q compares diagnostic builds with it.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import run as bench

DURABLE = "durable-reference"


def cpu_ms(pid):
    """User and system CPU time of `pid` so far, ms (clock ticks of 10 ms)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def private_bus():
    p, line = bench.spawn(["dbus-daemon", f"--config-file={bench.HERE}/bus.conf", "--nofork", "--print-address=1"],
                          "unix:")
    return p, line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", metavar="NAME=BROKERD", help="a name and a brokerd executable")
    ap.add_argument("--k", type=int, default=100, help="subscribers (default 100)")
    ap.add_argument("--reps", type=int, default=10, help="alternations (default 10)")
    ap.add_argument("--rounds", type=int, default=15, help="sign-outs a repetition (default 15)")
    args = ap.parse_args()
    builds = []
    for item in args.builds:
        name, _, path = item.partition("=")
        if not name or not os.access(path, os.X_OK) or name == DURABLE:
            sys.exit(f"signout_ab: {item!r} is not NAME=EXECUTABLE (a brokerd build)")
        builds.append((name, path))
    bin_dir = os.path.realpath(subprocess.run(
        ["swift", "build", "-c", "release", "--scratch-path", bench.SCRATCH, "--show-bin-path"],
        cwd=bench.ROOT, check=True, capture_output=True, text=True).stdout.strip())
    for needed in (f"{bin_dir}/idp-sim", f"{bin_dir}/brokerctl", f"{bench.CBIN}/busbench", f"{bench.CBIN}/reference"):
        if not os.access(needed, os.X_OK):
            sys.exit(f"signout_ab: {needed} is missing: run `make bench` (or benchmarks/run.py) first")
    bench.raise_nofile()
    tmp = tempfile.mkdtemp(prefix="signout-ab.")
    try:
        idp, line = bench.spawn(["nice", "-n", "19", f"{bin_dir}/idp-sim", "--port", "0",
                                 "--users", f"{bench.ROOT}/examples/demo-users.json"], "listening on ")
        authority = line.split("listening on ", 1)[1] + "/contoso-demo/v2.0"
        config = os.path.join(tmp, "bench.conf")
        with open(os.open(config, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write('{"browserSignOut": "when-asked"}')  # as run.py: no xdg-open after each sign-out
        services = {}  # name: (address, its dbus-daemon, the service)
        account = {}
        for name, path in builds:
            bus, address = private_bus()
            state_dir = os.path.join(tmp, name)
            os.makedirs(state_dir, mode=0o700)
            brokerd, _ = bench.spawn([path, "--address", address, "--device-mode", "shared", "--authority", authority,
                                      "--state-dir", state_dir, "--token-storage", "plaintext-file",
                                      "--config", config], "brokerd ready")
            subprocess.run([f"{bin_dir}/brokerctl", "sign-in", "--client-id", "mail-app", "--username", bench.USER,
                            "--password-stdin", "--scope", bench.SCOPE, "--address", address],
                           input=bench.PASSWORD + "\n", text=True, stdout=subprocess.DEVNULL, check=True)
            account = bench.saved_state(state_dir).get("current") or account
            services[name] = (address, bus, brokerd)
        # The durable reference, answering as the signed-in account (its signal the same size).
        bus, address = private_bus()
        reference_dir = os.path.join(tmp, "reference")
        os.makedirs(reference_dir, mode=0o700)
        state_bytes = bench.snapshot_bytes(os.path.join(tmp, builds[0][0]))
        reference, _ = bench.spawn([f"{bench.CBIN}/reference", "--address", address, "--authority", authority,
                                    "--name", bench.BROKER_NAME, "--state-dir", reference_dir,
                                    "--state-bytes", str(state_bytes)] + bench.account_options(account),
                                   "reference ready")
        services[DURABLE] = (address, bus, reference)

        samples = {name: [] for name in services}
        replies = {name: [] for name in services}
        firsts = {name: [] for name in services}
        cpu = {name: [0.0, 0.0, 0.0] for name in services}
        for rep in range(args.reps):
            for name, (address, bus, service) in services.items():
                before = (cpu_ms(service.pid), cpu_ms(bus.pid), cpu_ms(idp.pid))
                result = bench.busbench("signout", "-k", str(args.k), "--rounds", str(args.rounds), "--warmup", "2",
                                        address=address, dest=bench.BROKER_NAME)
                after = (cpu_ms(service.pid), cpu_ms(bus.pid), cpu_ms(idp.pid))
                for i in range(3):
                    cpu[name][i] += after[i] - before[i]
                samples[name] += result["samples_us"]
                replies[name].append(result["reply_p50_us"])
                firsts[name].append(result["first_p50_us"])
            bench.log(f"   rep {rep + 1}/{args.reps} p50 so far: "
                      + ", ".join(f"{n} {statistics.median(v):.0f} µs" for n, v in samples.items()))
        reference_p50 = statistics.median(samples[DURABLE])
        rounds = args.reps * (args.rounds + 2)
        print(f"sign-out to the last of K={args.k} subscribers, {args.reps} x {args.rounds} rounds each")
        print(f"{'':20} {'p25':>7} {'p50':>7} {'p75':>7} {'mean':>7} {'/ref':>6} {'first':>7} {'reply':>7}"
              f"   CPU a round (ms): service, dbus-daemon, idp-sim")
        for name, values in samples.items():
            q = statistics.quantiles(values, n=4)
            c = [x / rounds for x in cpu[name]]
            print(f"{name:20} {q[0]:7.0f} {q[1]:7.0f} {q[2]:7.0f} {statistics.mean(values):7.0f} "
                  f"{q[1] / reference_p50:6.3f} {statistics.median(firsts[name]):7.0f} "
                  f"{statistics.median(replies[name]):7.0f}   "
                  f"{c[0]:.2f}, {c[1]:.2f}, {c[2]:.2f}")
    finally:
        for p in list(bench.procs):
            try:
                bench.stop(p)
            except Exception:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
