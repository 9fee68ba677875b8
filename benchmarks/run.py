#!/usr/bin/env python3
"""brokerd against a hand-written C libdbus service, side by side.

    python3 benchmarks/run.py [--pin] [--smoke] [--reps N] [--out FILE]

Builds the C reference and clients (gcc, pkg-config dbus-1) and brokerd (release,
.build-bench), then for each comparison starts a private dbus-daemon
(benchmarks/bus.conf, raised limits) with both services on it: the reference owns
io.shareddevice.Reference1, brokerd io.shareddevice.Broker1; the clients call both the same
way (--dest). Repetitions alternate reference, brokerd, reference, brokerd, ...; each
statistic is the median of the repetition values with their min-max as the spread.
--pin runs both services under `taskset -c 0`.
"""
import argparse, json, os, resource, shlex, shutil, signal, statistics, subprocess, sys, tempfile, time, platform
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRATCH = os.path.join(ROOT, ".build-bench")
CBIN = os.path.join(SCRATCH, "c")
REF_NAME = "io.shareddevice.Reference1"
# The reference in durable mode: it writes its state file as brokerd writes a snapshot.
DURABLE_NAME = "io.shareddevice.ReferenceDurable1"
BROKER_NAME = "io.shareddevice.Broker1"
USER, PASSWORD = "alice@contoso.example", "alice-Demo-Passw0rd"
SCOPE = "User.Read"

args = None
procs = []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def build():
    os.makedirs(CBIN, exist_ok=True)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "dbus-1"], check=True,
                           capture_output=True, text=True).stdout.split()
    for name, src in (("reference", "reference/reference.c"), ("busbench", "clients/busbench.c")):
        sh(["gcc", "-O2", "-g", "-Wall", "-o", os.path.join(CBIN, name), os.path.join(HERE, src)] + flags)
    # As `make release` builds them: the Makefile's RELEASE_FLAGS (the Swift runtime and Foundation
    # linked statically, no $ORIGIN search path, ...).
    release = ["swift", "build", "-c", "release"] + release_flags() + ["--scratch-path", SCRATCH]
    log("== " + " ".join(release[:-2]) + " --scratch-path .build-bench")
    sh(release, cwd=ROOT, stdout=subprocess.DEVNULL)
    # The programs by their real path, as installed ones are run (dbus-send is /usr/bin's): the bin path
    # SwiftPM prints goes through a symbolic link, which costs every exec of brokerctl a few percent.
    return os.path.realpath(subprocess.run(release + ["--show-bin-path"],
                                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip())


def release_flags():
    """The Makefile's RELEASE_FLAGS (`make release-flags` prints them on a line of their own)."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "release-flags"], cwd=ROOT, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    line = next((l for l in out.splitlines() if l.startswith("RELEASE_FLAGS ")), None)
    if line is None:
        sys.exit("make release-flags printed no RELEASE_FLAGS line")
    return shlex.split(line[len("RELEASE_FLAGS "):])


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(target, 65536), hard))


def spawn(cmd, ready_prefix=None, timeout=60, pin=False, stdin=None):
    if pin:
        cmd = ["taskset", "-c", "0"] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=stdin, text=True)
    procs.append(p)
    line = None
    if ready_prefix is not None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{cmd[0]} exited before it was ready")
            if line.startswith(ready_prefix):
                break
        else:
            raise RuntimeError(f"{cmd[0]} not ready in {timeout}s")
    return p, (line or "").strip()


def saved_state(state_dir):
    """The state brokerd has written: state.json with the top-level keys of each state.journal line
    applied (a value replaces, null removes), as brokerd reads them at start."""
    with open(os.path.join(state_dir, "state.json")) as f:
        state = json.load(f)
    try:
        with open(os.path.join(state_dir, "state.journal")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            change = json.loads(line)
        except ValueError:
            break
        for key in ("current", "singleSignOn", "signedInBoot", "signedInAt", "signOutDeadline"):
            if key in change:
                if change[key] is None:
                    state.pop(key, None)
                else:
                    state[key] = change[key]
    return state


def snapshot_bytes(state_dir):
    """What a snapshot of the state brokerd has written would take (state.json and the journal's
    lines applied; state.json alone is the start's, before the sign-in's line): the size of the
    file the durable reference writes."""
    try:
        return len(json.dumps(saved_state(state_dir), separators=(",", ":")))
    except (OSError, ValueError):
        return 2048


def account_options(account):
    """The reference's options that make it answer as `account` (the signed-in one), so that its
    replies and signals are the size of brokerd's."""
    options = []
    for key, opt in (("username", "--username"), ("identifier", "--identifier"), ("tenantId", "--tenant-id"),
                     ("environment", "--environment"), ("name", "--display-name")):
        if isinstance(account.get(key), str):
            options += [opt, account[key]]
    return options


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill(); p.wait()
    if p in procs:
        procs.remove(p)


def wait_gone(pid, timeout=10):
    """Waits for a process that is not our child (busbench firstcall started it) to end."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def memory_of(pid):
    """RSS, PSS (file pages shared with other processes counted in part) and private dirty pages
    (what this process alone costs), KiB, from /proc/PID/smaps_rollup."""
    fields = {"Rss": "rss_kib", "Pss": "pss_kib", "Private_Dirty": "private_dirty_kib", "Anonymous": "anonymous_kib"}
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in fields:
                out[fields[key]] = int(line.split()[1])
    return out


def busbench(*a, address, dest, timeout=600):
    out = subprocess.run([os.path.join(CBIN, "busbench"), a[0], "--address", address, "--dest", dest] + list(a[1:]),
                         check=True, capture_output=True, text=True, timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


class Env:
    """One private bus, idp-sim, brokerd (signed in) and the reference."""

    def __init__(self, bin_dir, state=None, signed_in=True, token_storage="plaintext-file"):
        self.bin = bin_dir
        self.token_storage = token_storage
        self.tmp = tempfile.mkdtemp(prefix="brokerd-bench-")
        self.bus, line = spawn(["dbus-daemon", f"--config-file={HERE}/bus.conf", "--nofork", "--print-address=1"], "unix:")
        self.address = line
        # The provider at the lowest CPU priority: on a device it is a remote service, its work done
        # elsewhere. Here it shares the two cores, and the revocation a sign-out sends it (0.7-1.1 ms
        # of idp-sim's CPU) would compete with the apps' reading of AccountChanged, which the
        # reference, sending no revocation, does not have to share.
        self.idp, line = spawn(["nice", "-n", "19", f"{bin_dir}/idp-sim", "--port", "0", "--users", f"{ROOT}/examples/demo-users.json"],
                               "listening on ")
        self.idp_url = line.split("listening on ", 1)[1]
        self.authority = self.idp_url + "/contoso-demo/v2.0"
        self.state_dir = os.path.join(self.tmp, "state")
        if state is not None:
            os.makedirs(self.state_dir, mode=0o700)
            path = os.path.join(self.state_dir, "state.json")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                json.dump(state, f)
        self.brokerd = self.start_brokerd()
        if signed_in and state is None:
            sh([f"{bin_dir}/brokerctl", "sign-in", "--client-id", "mail-app", "--username", USER, "--password-stdin",
                "--scope", SCOPE, "--address", self.address], input=PASSWORD + "\n", text=True, stdout=subprocess.DEVNULL)
        tok = self.cached_token()
        fields = account_options(self.account() or {})
        reference = [f"{CBIN}/reference", "--address", self.address,
                     "--token-len", str(len(tok.get("accessToken", "x" * 900))),
                     "--id-token-len", str(len(tok.get("idToken") or "x" * 900)),
                     "--authority", self.authority] + fields + ([] if signed_in else ["--signed-out"])
        self.ref, _ = spawn(reference + ["--name", REF_NAME], "reference ready", pin=args.pin)
        # The durable reference writes a file the size of brokerd's state.json (the sign-in's).
        durable_dir = os.path.join(self.tmp, "reference-state")
        os.makedirs(durable_dir, mode=0o700)
        self.state_bytes = snapshot_bytes(self.state_dir)
        self.ref_durable, _ = spawn(reference + ["--name", DURABLE_NAME, "--state-dir", durable_dir,
                                                 "--state-bytes", str(self.state_bytes)], "reference ready", pin=args.pin)

    def brokerd_cmd(self):
        # No browser here: shared mode's default browserSignOut (always) would run xdg-open after
        # every sign-out (no desktop portal on this bus), a shell script of a dozen processes,
        # competing for the two cores with the subscribers. A kiosk asks its portal, one D-Bus
        # call; the bench measures the sign-out to the apps, not this machine's xdg-open.
        config = os.path.join(self.tmp, "bench.conf")
        if not os.path.exists(config):
            with open(os.open(config, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                json.dump({"browserSignOut": "when-asked"}, f)
        return [f"{self.bin}/brokerd", "--address", self.address, "--device-mode", "shared",
                "--authority", self.authority, "--state-dir", self.state_dir, "--token-storage", self.token_storage,
                "--config", config]

    def start_brokerd(self):
        p, _ = spawn(self.brokerd_cmd(), "brokerd ready", pin=args.pin)
        return p

    def account(self):
        try:
            return saved_state(self.state_dir).get("current")
        except (OSError, ValueError):
            return None

    def cached_token(self):
        """The token brokerd hands mail-app (from its cache), as `brokerctl token --json` prints it; {}
        when nobody is signed in. Its lengths size the reference's replies."""
        r = subprocess.run([f"{self.bin}/brokerctl", "token", "--client-id", "mail-app", "--scope", SCOPE,
                            "--json", "--address", self.address], capture_output=True, text=True)
        try:
            return json.loads(r.stdout) if r.returncode == 0 else {}
        except ValueError:
            return {}

    def close(self):
        for p in (getattr(self, "ref", None), getattr(self, "ref_durable", None), getattr(self, "brokerd", None),
                  getattr(self, "idp", None), self.bus):
            if p is not None:
                stop(p)
        shutil.rmtree(self.tmp, ignore_errors=True)


SERVICES = (("reference", REF_NAME), ("brokerd", BROKER_NAME))
# Sign-out also against the durable reference, which keeps the same durability rule as brokerd.
SIGN_OUT_SERVICES = (("reference", REF_NAME), ("durable_reference", DURABLE_NAME), ("brokerd", BROKER_NAME))


def alternate(reps, fn, services=SERVICES):
    """fn(service_name, dest) -> dict; returns {service: [dict per repetition]}, the services alternating."""
    out = {s: [] for s, _ in services}
    for r in range(reps):
        for s, dest in services:
            res = fn(s, dest)
            out[s].append(res)
            log(f"   rep {r + 1}/{reps} {s:9s} {json.dumps({k: v for k, v in res.items() if k != 'samples_us'})}")
    return out


def summary(values):
    values = [v for v in values if v is not None]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def state_with_clients(count, account):
    """state.json (format 2) with `count` clients, each signed in as `account` with a refresh token. Access
    tokens are not stored (brokerd keeps them in memory only)."""
    key = account["identifier"]
    clients = {}
    for i in range(count):
        cid = f"app-{i:05d}"
        clients[cid] = {"lastSeen": key, "account": key, "refreshToken": f"rt-{i:05d}-" + "r" * 40}
    return {"version": 2, "deviceId": "0f8e1c2d-3b4a-4c5d-8e6f-7a8b9c0d1e2f", "current": account,
            "accounts": {key: account}, "clients": clients}


PARTS = ("calls", "signout", "process", "memory", "stored", "refresh", "sso", "wakeups")


def main():
    global args
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pin", action="store_true", help="run the services under taskset -c 0")
    ap.add_argument("--smoke", action="store_true", help="a quick pass (< 60 s): a few hundred calls, K up to 10")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None,
                    help="comma-separated parts to run: " + ", ".join(PARTS) + " (default: all; the results go to "
                    "results/partial.json)")
    ap.add_argument("--idle-seconds", type=int, default=None,
                    help="how long the wake-up count watches idle daemons (default 600; 20 with --smoke)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else set(PARTS)
    unknown = only - set(PARTS)
    if unknown:
        ap.error("unknown parts: " + ", ".join(sorted(unknown)))
    smoke = args.smoke
    out_path = args.out or os.path.join(
        HERE, "results", "partial.json" if args.only else "smoke.json" if smoke else "results.json")
    raise_nofile()
    bin_dir = build()
    t_start = time.time()
    R = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "smoke": smoke, "pinned": args.pin,
         "reps": args.reps or (1 if smoke else 5), "machine": machine()}
    # The wake-ups first, started in the background: they watch idle daemons for minutes, while
    # the other parts run on buses of their own (a daemon woken by the load would not be idle).
    idle_watch = start_wakeups(bin_dir) if "wakeups" in only else None
    try:
        if only & {"calls", "signout", "process", "memory"}:
            on_one_bus(bin_dir, R, only)
        if "stored" in only:
            stored_state(bin_dir, R)
        if "refresh" in only:
            silent_refresh(bin_dir, R)
        if "sso" in only:
            single_sign_on(bin_dir, R)
    finally:
        if idle_watch is not None:
            R["wakeups"] = idle_watch.finish()
    R["seconds"] = round(time.time() - t_start, 1)
    R["targets"] = targets(R)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(R, f, indent=1)
    if "signout" in R:
        plot(R, os.path.join(os.path.dirname(out_path), "subscribers-smoke.png" if smoke else "subscribers.png"))
    print_table(R)
    log(f"results: {out_path}")
    return 0 if not smoke else (0 if all(t["value"] is not None for t in R["targets"]) else 1)


def on_one_bus(bin_dir, R, only):
    """The calls, the sign-out, the process start and the memory: one bus, brokerd signed in, both references."""
    smoke = R["smoke"]
    reps = R["reps"]
    n_lat, w_lat = (300, 50) if smoke else (5000, 500)
    n_thr, w_thr = (500, 100) if smoke else (20000, 2000)
    ks = [1, 10] if smoke else [1, 10, 100, 1000]
    env = Env(bin_dir)
    try:
        R["memory"] = {"after_sign_in": memory_of(env.brokerd.pid), "reference_idle": memory_of(env.ref.pid)}
        if "calls" in only:
            R["reply_sizes"] = {s: busbench("sizes", address=env.address, dest=d) for s, d in SERVICES}
            log("== reply sizes", json.dumps(R["reply_sizes"]))

            log(f"== GetCurrentAccount round trip, {n_lat} calls after {w_lat}")
            lat = alternate(reps, lambda s, d: busbench("latency", "--method", "gca", "-n", str(n_lat), "--warmup", str(w_lat),
                                                        address=env.address, dest=d))
            R["gca_latency"] = {s: {"p50_us": summary([x["p50_us"] for x in v]), "p99_us": summary([x["p99_us"] for x in v]),
                                    "mean_us": summary([x["mean_us"] for x in v])} for s, v in lat.items()}

            log(f"== GetCurrentAccount, 128 in flight, {n_thr} calls")
            thr = alternate(reps, lambda s, d: busbench("throughput", "--method", "gca", "--inflight", "128", "-n", str(n_thr),
                                                        "--warmup", str(w_thr), address=env.address, dest=d))
            R["gca_throughput"] = {s: {"calls_per_s": summary([x["calls_per_s"] for x in v])} for s, v in thr.items()}

            log(f"== AcquireTokenSilent (cached token), {n_lat} calls")
            ats = alternate(reps, lambda s, d: busbench("latency", "--method", "ats", "-n", str(n_lat), "--warmup", str(w_lat),
                                                        address=env.address, dest=d))
            R["ats_latency"] = {s: {"p50_us": summary([x["p50_us"] for x in v]), "p99_us": summary([x["p99_us"] for x in v])}
                                for s, v in ats.items()}

        if "signout" in only:
            log("== sign-out to the last of K subscribers")
            R["signout"] = {}
            R["durable_reference_state_bytes"] = env.state_bytes
            for k in ks:
                # 30 rounds (20 at K = 1000) a repetition: with 15 (10), one repetition's ratio ranged
                # 0.9-1.6 within a run at K = 100, 0.8-1.3 at K = 1000. Rounds are cheap; the
                # subscribers' connections are what takes the time.
                rounds = 5 if smoke else (20 if k >= 1000 else 30)
                res = alternate(reps if k < 1000 else max(3, reps // 2 + 1),
                                lambda s, d: busbench("signout", "-k", str(k), "--rounds", str(rounds), "--warmup", "2",
                                                      address=env.address, dest=d, timeout=900),
                                SIGN_OUT_SERVICES)
                R["signout"][str(k)] = {s: {"p50_us": summary([x["p50_us"] for x in v]),
                                            "reply_p50_us": summary([x["reply_p50_us"] for x in v]),
                                            "first_p50_us": summary([x["first_p50_us"] for x in v]),
                                            "samples_us": [x["samples_us"] for x in v]} for s, v in res.items()}

        if "process" in only:
            log("== process start to exit: brokerctl device-info vs dbus-send --print-reply, brokerctl --version")
            # 200 alternations: the p50 of 40 moved by 0.05 from run to run on this VM.
            n_proc = 10 if smoke else 200
            # `brokerctl --version` asks nothing: its time is the program's start and exit alone.
            cmds = {"brokerctl": [f"{bin_dir}/brokerctl", "device-info", "--address", env.address],
                    "dbus-send": ["dbus-send", f"--bus={env.address}", "--print-reply", f"--dest={BROKER_NAME}",
                                  "/io/shareddevice/Broker1", "io.shareddevice.Broker1.GetDeviceInformation"],
                    "brokerctl_version": [f"{bin_dir}/brokerctl", "--version"]}
            times = {k: [] for k in cmds}
            for i in range(n_proc + 3):
                for k, c in cmds.items():
                    t0 = time.perf_counter()
                    sh(c, stdout=subprocess.DEVNULL)
                    if i >= 3:
                        times[k].append((time.perf_counter() - t0) * 1e3)
            R["device_info_process"] = {k: {"p50_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "n": len(v)}
                                        for k, v in times.items()}
            log("  ", json.dumps(R["device_info_process"]))

        # After the load (every part above that ran); then, in a full run, once brokerd has given
        # back what the load left (a minute after its last request to the provider).
        time.sleep(1)
        R["memory"]["after_load"] = memory_of(env.brokerd.pid)
        R["memory"]["reference_after_load"] = memory_of(env.ref.pid)
        if not smoke:
            log("== memory: waiting 65 s for brokerd to give back what the load left")
            time.sleep(65)
            R["memory"]["after_load_settled"] = memory_of(env.brokerd.pid)
        if "memory" in only:
            log("== RSS: idle, and per 1,000 connected subscriber apps")
            time.sleep(1)
            R["rss_kib"] = {"brokerd_after_benchmarks": rss_kib(env.brokerd.pid), "reference_after_benchmarks": rss_kib(env.ref.pid)}
            # a freshly started brokerd (signed in, one clientId), idle
            stop(env.brokerd)
            env.brokerd = env.start_brokerd()
            time.sleep(1)
            R["memory"]["idle_after_start"] = memory_of(env.brokerd.pid)
            R["rss_kib"]["brokerd_idle"] = rss_kib(env.brokerd.pid)
            R["rss_kib"]["reference_idle"] = rss_kib(env.ref.pid)
            napps = 100 if smoke else 1000
            growth = {}
            for s, d in SERVICES:
                p = env.brokerd if s == "brokerd" else env.ref
                before = rss_kib(p.pid)
                holder = subprocess.Popen([f"{CBIN}/busbench", "hold", "-k", str(napps), "--address", env.address, "--dest", d],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                holder.stdout.readline()
                time.sleep(1)
                after = rss_kib(p.pid)
                holder.stdin.close(); holder.wait()
                time.sleep(0.5)
                growth[s] = {"before_kib": before, "with_apps_kib": after, "after_apps_left_kib": rss_kib(p.pid),
                             "apps": napps, "growth_kib_per_1000": (after - before) * 1000 / napps}
            R["rss_per_1000_apps"] = growth
            log("  ", json.dumps(R["rss_kib"]), json.dumps(growth))
    finally:
        env.close()


def stored_state(bin_dir, R):
    log("== stored state: 10,000 clientIds (RSS growth and start-up to the first answered call)")
    smoke = R["smoke"]
    nclients = 1000 if smoke else 10000
    startup = {"1": [], str(nclients): []}
    rss_state = {"1": [], str(nclients): []}
    env = Env(bin_dir, signed_in=True)
    try:
        stop(env.brokerd); env.brokerd = None
        # Read after the clean stop, which folds the journal into state.json.
        account = json.load(open(os.path.join(env.state_dir, "state.json")))["current"]
        for rep in range(1 if smoke else 3):
            for count in (1, nclients):
                st = state_with_clients(count, account)
                with open(os.path.join(env.state_dir, "state.json"), "w") as f:
                    json.dump(st, f)
                cmd = (["taskset", "-c", "0"] if args.pin else []) + env.brokerd_cmd()
                r = busbench("firstcall", "--client", "app-00000", "--", *cmd, address=env.address, dest=BROKER_NAME)
                time.sleep(1)
                startup[str(count)].append(r["ms"])
                rss_state[str(count)].append(rss_kib(r["pid"]))
                os.kill(r["pid"], signal.SIGTERM)
                wait_gone(r["pid"])
                log(f"   rep {rep + 1} clients={count} first call after {r['ms']:.1f} ms, rss {rss_state[str(count)][-1]} KiB")
        size = os.path.getsize(os.path.join(env.state_dir, "state.json"))
        R["stored_state"] = {"clients": nclients, "state_json_bytes": size,
                             "startup_ms": {k: summary(v) for k, v in startup.items()},
                             "rss_kib": {k: summary(v) for k, v in rss_state.items()},
                             "growth_kib_per_10000": (statistics.median(rss_state[str(nclients)]) - statistics.median(rss_state["1"])) * 10000 / nclients}
    finally:
        env.close()


def silent_refresh(bin_dir, R):
    smoke = R["smoke"]
    log("== silent refresh through idp-sim (forceRefresh)")
    env = Env(bin_dir)
    try:
        n_ref = 20 if smoke else 100
        dbus_refresh = busbench("latency", "--method", "ats-refresh", "-n", str(n_ref), "--warmup", "5",
                                address=env.address, dest=BROKER_NAME)
        ctl = []
        for i in range(5 if smoke else 20):
            t0 = time.perf_counter()
            sh([f"{bin_dir}/brokerctl", "token", "--client-id", "mail-app", "--scope", SCOPE, "--force-refresh",
                "--address", env.address], stdout=subprocess.DEVNULL)
            ctl.append((time.perf_counter() - t0) * 1e3)
        # the raw token-endpoint POST with the same grant, chained through the rotated refresh tokens
        stop(env.brokerd); env.brokerd = None
        st = json.load(open(os.path.join(env.state_dir, "state.json")))
        rt = st["clients"]["mail-app"]["refreshToken"]
        token_url = env.authority + "/oauth2/v2.0/token"
        raw = []
        for i in range(n_ref + 5):
            t0 = time.perf_counter()
            res = subprocess.run(["curl", "-sS", "-X", "POST", token_url, "-d", "grant_type=refresh_token",
                                  "-d", "client_id=mail-app", "--data-urlencode", f"refresh_token={rt}",
                                  "--data-urlencode", f"scope=openid profile offline_access {SCOPE}",
                                  "-w", "\n%{time_total}"], check=True, capture_output=True, text=True)
            body, total = res.stdout.rsplit("\n", 1)
            rt = json.loads(body)["refresh_token"]
            if i >= 5:
                raw.append(float(total) * 1e6)
        raw.sort()
        R["silent_refresh"] = {"dbus_call": dbus_refresh, "brokerctl_token_p50_ms": statistics.median(ctl),
                               "raw_token_post_curl_p50_us": statistics.median(raw),
                               "raw_token_post_curl_p99_us": raw[int(0.99 * (len(raw) - 1) + 0.5)]}
        R["silent_refresh"]["broker_share"] = 1 - R["silent_refresh"]["raw_token_post_curl_p50_us"] / dbus_refresh["p50_us"]
    finally:
        env.close()
    # The same with --token-storage memory: the difference is the state file's write and flush
    # (a refresh rotates the refresh token, which must be on disk before the reply).
    env = Env(bin_dir, token_storage="memory")
    try:
        in_memory = busbench("latency", "--method", "ats-refresh", "-n", str(n_ref), "--warmup", "5",
                             address=env.address, dest=BROKER_NAME)
        R["silent_refresh"]["dbus_call_memory_storage"] = in_memory
        R["silent_refresh"]["state_write_and_flush_us"] = dbus_refresh["p50_us"] - in_memory["p50_us"]
        log("  ", json.dumps(R["silent_refresh"]))
    finally:
        env.close()


def single_sign_on(bin_dir, R):
    smoke = R["smoke"]
    log("== single sign-on: a second app's first token (Native SSO), beside a cached one")
    env = Env(bin_dir)
    try:
        rounds = 10 if smoke else 50
        # One process times every call (dbus-python on Debian's python3), so neither number pays a process start.
        out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "sso_first_token.py"), env.address, str(rounds),
                              USER, PASSWORD, SCOPE], check=True, capture_output=True, text=True).stdout
        timed = json.loads(out.strip().splitlines()[-1])
        # The provider's share: the same exchange, sent to idp-sim's token endpoint with curl.
        sh([f"{bin_dir}/brokerctl", "sign-in", "--client-id", "mail-app", "--username", USER, "--password-stdin",
            "--scope", SCOPE, "--address", env.address], input=PASSWORD + "\n", text=True, stdout=subprocess.DEVNULL)
        grant = next(iter(saved_state(env.state_dir)["singleSignOn"].values()))
        token_url = env.authority + "/oauth2/v2.0/token"
        raw = []
        for i in range(rounds + 5):
            res = subprocess.run(["curl", "-sS", "-X", "POST", token_url,
                                  "-d", "grant_type=urn:ietf:params:oauth:grant-type:token-exchange",
                                  "-d", "client_id=notes-app", "--data-urlencode", f"audience={env.authority}",
                                  "--data-urlencode", f"subject_token={grant['idToken']}",
                                  "-d", "subject_token_type=urn:ietf:params:oauth:token-type:id_token",
                                  "--data-urlencode", f"actor_token={grant['deviceSecret']}",
                                  "-d", "actor_token_type=urn:openid:params:token-type:device-secret",
                                  "--data-urlencode", f"scope=openid profile offline_access {SCOPE}",
                                  "-w", "\n%{time_total}"], check=True, capture_output=True, text=True)
            body, total = res.stdout.rsplit("\n", 1)
            if "access_token" not in json.loads(body):
                raise RuntimeError(f"the exchange failed: {body[:200]}")
            if i >= 5:
                raw.append(float(total) * 1e6)
        first_p50 = statistics.median(timed["first_us"])
        R["single_sign_on"] = {"first_token_p50_us": first_p50, "first_token_max_us": max(timed["first_us"]),
                               "cached_token_p50_us": statistics.median(timed["cached_us"]),
                               "raw_exchange_curl_p50_us": statistics.median(raw), "rounds": rounds}
        R["single_sign_on"]["broker_share_us"] = first_p50 - R["single_sign_on"]["raw_exchange_curl_p50_us"]
        log("  ", json.dumps(R["single_sign_on"]))
    finally:
        env.close()


class IdleWatch:
    """Daemons left alone, each on a bus of its own, for `seconds`: brokerd signed out, signed in,
    and signed in with what the shift issues configure (sign-out after inactivity, heard from a
    headless mutter's idle monitor, and Shared Signals polled every POLL_SECONDS), beside the C
    reference. Counted: each process's context switches (every thread's: a thread that wakes is
    switched in) and its CPU time, by `perf stat` where it counts, else from /proc. Nothing calls
    them meanwhile: what they count is what they do on their own."""

    POLL_SECONDS = 30

    def __init__(self, bin_dir, seconds):
        self.seconds = seconds
        self.tmp = tempfile.mkdtemp(prefix="brokerd-idle-")
        self.procs = []
        self.daemons = {}
        with open(f"{ROOT}/examples/demo-users.json") as f:
            users = json.load(f)
        # brokerd's own confidential client, for the Shared Signals receiver's token.
        users["clients"].append({"clientId": "shift-receiver", "clientSecret": "receiver-S3cret"})
        users_file = os.path.join(self.tmp, "users.json")
        with open(users_file, "w") as f:
            json.dump(users, f)
        secret = os.path.join(self.tmp, "receiver.secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("receiver-S3cret\n")
        idp, line = self.spawn([f"{bin_dir}/idp-sim", "--port", "0", "--users", users_file], "listening on ")
        authority = line.split("listening on ", 1)[1] + "/contoso-demo/v2.0"
        shift = os.path.join(self.tmp, "shift.conf")
        with open(os.open(shift, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump({"idleSignOutSeconds": 3600, "sharedSignals": {
                "transmitter": authority, "clientId": "shift-receiver", "clientSecretFile": secret,
                "pollSeconds": self.POLL_SECONDS}}, f)
        for name, signed_in, config in (("signed_out", False, None), ("signed_in", True, None),
                                        ("signed_in_shift", True, shift)):
            address = self.bus()
            if config:
                self.mutter(address)
            state = os.path.join(self.tmp, name)
            cmd = [f"{bin_dir}/brokerd", "--address", address, "--device-mode", "shared", "--authority", authority,
                   "--state-dir", state, "--token-storage", "plaintext-file"] + (["--config", config] if config else [])
            brokerd, _ = self.spawn(cmd, "brokerd ready")
            if signed_in:
                sh([f"{bin_dir}/brokerctl", "sign-in", "--client-id", "mail-app", "--username", USER,
                    "--password-stdin", "--scope", SCOPE, "--address", address],
                   input=PASSWORD + "\n", text=True, stdout=subprocess.DEVNULL)
            self.daemons[name] = brokerd.pid
        ref, _ = self.spawn([f"{CBIN}/reference", "--address", self.bus(), "--name", REF_NAME], "reference ready")
        self.daemons["reference"] = ref.pid
        # Counted once each daemon has settled: the sign-ins' work done, and the HTTP client's idle
        # release a minute after the last request (once, not a period) behind it.
        time.sleep(2 if args.smoke else 66)
        self.perf = shutil.which("perf")
        self.counting = {}
        for name, pid in self.daemons.items():
            out = os.path.join(self.tmp, f"perf-{name}.csv")
            counter = None
            if self.perf:
                counter = subprocess.Popen([self.perf, "stat", "-x,", "-o", out, "-e", "context-switches,task-clock",
                                            "-p", str(pid), "--", "sleep", str(seconds)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.counting[name] = (counter, out, self.proc_counts(pid))
        self.began = time.time()
        log(f"== wake-ups: {len(self.daemons)} idle daemons watched for {seconds} s in the background")

    def spawn(self, cmd, ready, env=None):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.procs.append(p)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{cmd[0]} exited before it was ready")
            if line.startswith(ready) or ready in line:
                return p, line.strip()
        raise RuntimeError(f"{cmd[0]} not ready in 60 s")

    def bus(self):
        _, line = self.spawn(["dbus-daemon", f"--config-file={HERE}/bus.conf", "--nofork", "--print-address=1"], "unix:")
        return line

    def mutter(self, address):
        """A headless mutter on `address`, serving its idle monitor (what GNOME's session has)."""
        if not os.access("/usr/bin/mutter", os.X_OK):
            log("   (no /usr/bin/mutter: the shift configuration runs without an idle monitor)")
            return
        home = os.path.join(self.tmp, "mutter-home")
        os.makedirs(os.path.join(home, "run"), mode=0o700, exist_ok=True)
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address, XDG_RUNTIME_DIR=home + "/run", HOME=home,
                   GSETTINGS_BACKEND="memory", DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent", DISPLAY="",
                   WAYLAND_DISPLAY="")
        p = subprocess.Popen(["/usr/bin/mutter", "--headless", "--wayland", "--no-x11", "--virtual-monitor", "1280x800"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        self.procs.append(p)
        deadline = time.time() + 20
        while time.time() < deadline:
            r = subprocess.run(["dbus-send", f"--bus={address}", "--print-reply", "--dest=org.freedesktop.DBus",
                                "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner",
                                "string:org.gnome.Mutter.IdleMonitor"], capture_output=True, text=True)
            if "boolean true" in r.stdout:
                return
            time.sleep(0.1)  # polling the bus for mutter's readiness; it has no readiness line
        raise RuntimeError("mutter did not serve its idle monitor within 20 s")

    @staticmethod
    def proc_counts(pid):
        """Context switches of every thread now, and CPU seconds, from /proc."""
        switches = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            switches += int(line.split()[1])
            except OSError:
                pass
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return {"switches": switches, "cpu_s": cpu, "threads": len(os.listdir(f"/proc/{pid}/task"))}

    def finish(self):
        left = self.seconds - (time.time() - self.began)
        if left > 0:
            log(f"== wake-ups: waiting {left:.0f} s more for the idle window to end")
            time.sleep(left)
        minutes = self.seconds / 60
        out = {"seconds": self.seconds, "poll_seconds": self.POLL_SECONDS, "counted_by": "perf" if self.perf else "proc"}
        for name, (counter, path, before) in self.counting.items():
            after = self.proc_counts(self.daemons[name])
            settled = memory_of(self.daemons[name])
            row = {"proc_switches": after["switches"] - before["switches"], "cpu_ms": (after["cpu_s"] - before["cpu_s"]) * 1e3,
                   "threads": after["threads"], "memory_at_the_end": settled}
            if counter is not None:
                counter.wait(30)
                with open(path) as f:
                    for line in f:
                        parts = line.strip().split(",")
                        if len(parts) > 3 and parts[2] in ("context-switches", "task-clock"):
                            value = None if parts[0].startswith("<not") else float(parts[0])
                            row["perf_" + parts[2].replace("-", "_")] = value or 0.0
            switches = row.get("perf_context_switches", row["proc_switches"])
            row["switches_per_minute"] = switches / minutes
            out[name] = row
        out["expected_polls_per_minute"] = 60 / self.POLL_SECONDS
        log("  ", json.dumps(out))
        for p in reversed(self.procs):
            stop(p)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return out


def start_wakeups(bin_dir):
    return IdleWatch(bin_dir, args.idle_seconds or (20 if args.smoke else 600))


def targets(R):
    """The targets of the parts that ran: each a ratio against a reference measured in the same
    run, or a figure of brokerd's own (memory, wake-ups) beside the reference's."""
    m = lambda d: d["median"]
    T = []

    def add(name, value, target, op, spread=None, ref=None, brokerd=None):
        met = (None if value is None or op == "report"
               else value <= target if op == "<=" else value >= target if op == ">=" else value < target)
        T.append({"name": name, "value": value, "target": "" if op == "report" else f"{op} {target}", "met": met,
                  "spread": spread, "reference": ref, "brokerd": brokerd})

    if "gca_latency" in R:
        g = R["gca_latency"]
        for p in ("p50_us", "p99_us"):
            b, r = g["brokerd"][p], g["reference"][p]
            add(f"GetCurrentAccount round trip {p[:3]} (brokerd/ref)", m(b) / m(r), 1.15, "<=",
                [b["min"] / r["max"], b["max"] / r["min"]], r, b)
        b, r = R["gca_throughput"]["brokerd"]["calls_per_s"], R["gca_throughput"]["reference"]["calls_per_s"]
        add("GetCurrentAccount 128 in flight, calls/s (brokerd/ref)", m(b) / m(r), 0.85, ">=",
            [b["min"] / r["max"], b["max"] / r["min"]], r, b)
        a, gb = R["ats_latency"]["brokerd"]["p50_us"], g["brokerd"]["p50_us"]
        add("AcquireTokenSilent cached p50 / brokerd GetCurrentAccount p50", m(a) / m(gb), 1.3, "<=",
            [a["min"] / gb["max"], a["max"] / gb["min"]], R["ats_latency"]["reference"]["p50_us"], a)
    if "signout" in R:
        for k, v in R["signout"].items():
            b, r = v["brokerd"]["p50_us"], v["durable_reference"]["p50_us"]
            add(f"sign-out to last of K={k} subscribers p50 (brokerd/durable ref)", m(b) / m(r), 1.2, "<=",
                [b["min"] / r["max"], b["max"] / r["min"]], r, b)
        for k, v in R["signout"].items():
            # The service's own part: from the call to the first app; the rest is the bus's delivery.
            if "first_p50_us" in v["brokerd"]:
                b, r = v["brokerd"]["first_p50_us"], v["durable_reference"]["first_p50_us"]
                add(f"  to the first of K={k} (brokerd/durable ref)", m(b) / m(r), None, "report",
                    [b["min"] / r["max"], b["max"] / r["min"]], r, b)
        for k, v in R["signout"].items():
            b, r = v["brokerd"]["p50_us"], v["reference"]["p50_us"]
            add(f"  the same against the in-memory ref (K={k})", m(b) / m(r), None, "report",
                [b["min"] / r["max"], b["max"] / r["min"]], r, b)
    if "device_info_process" in R:
        d = R["device_info_process"]
        # Reported, not a target: brokerctl is one program with ArgumentParser, a millisecond or two
        # behind dbus-send, which no person or script notices (BENCHMARKS.md, run U).
        add(f"brokerctl device-info / dbus-send, process start to exit p50 ({d['brokerctl']['p50_ms']:.1f} / "
            f"{d['dbus-send']['p50_ms']:.1f} ms)", d["brokerctl"]["p50_ms"] / d["dbus-send"]["p50_ms"], None, "report",
            None, d["dbus-send"], d["brokerctl"])
        if "brokerctl_version" in d:
            add(f"brokerctl --version, process start to exit p50, ms (dbus-send device info {d['dbus-send']['p50_ms']:.1f})",
                d["brokerctl_version"]["p50_ms"], None, "report", None, d["dbus-send"], d["brokerctl_version"])

    def memory_line(what, m, target):
        # Private dirty pages are what brokerd alone costs; RSS is mostly clean file pages (its code
        # and libraries) that the kernel reclaims by itself when memory is wanted.
        add(f"brokerd private dirty {what}, MiB (RSS {m['rss_kib'] / 1024:.1f}, PSS {m['pss_kib'] / 1024:.1f})",
            m["private_dirty_kib"] / 1024, target, "<=" if target else "report", None, None, m)

    if "memory" in R:
        mem = R["memory"]
        for key, what in (("after_sign_in", "a second after a sign-in (working)"),
                          ("after_load", "a second after the load (working)")):
            if key in mem:
                memory_line(what, mem[key], None)
        if "after_load_settled" in mem:
            memory_line("after the load, settled (65 s idle)", mem["after_load_settled"], 4)
    if "wakeups" in R and "memory_at_the_end" in R["wakeups"]["signed_in"]:
        memory_line(f"after a sign-in, settled ({R['wakeups']['seconds']} s idle)",
                    R["wakeups"]["signed_in"]["memory_at_the_end"], 4)
    if "rss_kib" in R:
        add("brokerd RSS a second after its start (reading discovery), MiB", R["rss_kib"]["brokerd_idle"] / 1024, None,
            "report", None, R["rss_kib"]["reference_idle"] / 1024, None)
    if "wakeups" in R and "memory_at_the_end" in R["wakeups"]["signed_out"]:
        memory_line(f"idle, signed out, settled ({R['wakeups']['seconds']} s)",
                    R["wakeups"]["signed_out"]["memory_at_the_end"], 4)
        add("brokerd RSS growth per 1,000 subscriber apps, MiB", R["rss_per_1000_apps"]["brokerd"]["growth_kib_per_1000"] / 1024,
            4, "<=", None, R["rss_per_1000_apps"]["reference"]["growth_kib_per_1000"] / 1024, None)
    if "stored_state" in R:
        s = R["stored_state"]
        add("brokerd RSS growth per 10,000 stored clientIds, MiB", s["growth_kib_per_10000"] / 1024, 10, "<=")
        st = s["startup_ms"][str(s["clients"])]
        add(f"brokerd start-up with {s['clients']} clientIds to first answered call, ms", st["median"], 100, "<",
            [st["min"], st["max"]])
    if "wakeups" in R:
        w = R["wakeups"]
        for name, what in (("signed_out", "signed out"), ("signed_in", "signed in")):
            add(f"idle brokerd {what}: context switches per minute (reference "
                f"{w['reference']['switches_per_minute']:.1f})", w[name]["switches_per_minute"], 0, "<=",
                None, w["reference"], w[name])
        shift = w["signed_in_shift"]
        add(f"idle brokerd with the shift's polling (one poll every {w['poll_seconds']} s): context switches "
            "per poll", shift["switches_per_minute"] / w["expected_polls_per_minute"], None, "report", None,
            w["reference"], shift)
    return T


def print_table(R):
    print(f"\n{'comparison':86s} {'value':>9s} {'target':>8s}  spread            met")
    for t in R["targets"]:
        sp = f"{t['spread'][0]:.2f}-{t['spread'][1]:.2f}" if t["spread"] else ""
        met = "" if t["met"] is None else "yes" if t["met"] else "NO"
        print(f"{t['name']:86s} {t['value']:9.3f} {t['target']:>8s}  {sp:16s}  {met}")
    sr = R.get("silent_refresh")
    if not sr:
        return
    print(f"\nsilent refresh over D-Bus p50 {sr['dbus_call']['p50_us'] / 1e3:.2f} ms; raw token POST (curl) p50 "
          f"{sr['raw_token_post_curl_p50_us'] / 1e3:.2f} ms; broker's own share {sr['broker_share'] * 100:.0f}%, of which "
          f"the state file's write and flush {sr['state_write_and_flush_us'] / 1e3:.2f} ms "
          f"(p50 with --token-storage memory {sr['dbus_call_memory_storage']['p50_us'] / 1e3:.2f} ms)")


def plot(R, path):
    """benchmarks/plot.py draws it; with this interpreter, else the system one (Debian's python3-matplotlib)."""
    src = os.path.join(os.path.dirname(path), "_plot_input.json")
    with open(src, "w") as f:
        json.dump(R, f)
    try:
        for py in (sys.executable, "/usr/bin/python3"):
            if os.path.exists(py) and subprocess.run([py, os.path.join(HERE, "plot.py"), src, path]).returncode == 0:
                log(f"plot: {path}")
                return
        log("matplotlib missing (apt-get install python3-matplotlib): no plot")
    finally:
        os.remove(src)


def machine():
    def cmd(c):
        try:
            return subprocess.run(c, capture_output=True, text=True).stdout.strip()
        except OSError:
            return None
    cpu = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip(); break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
            "swift": (cmd(["swift", "--version"]) or "").splitlines()[0] if cmd(["swift", "--version"]) else None,
            "dbus_daemon": (cmd(["dbus-daemon", "--version"]) or "").splitlines()[0],
            "git_head": cmd(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
            "release_flags": " ".join(release_flags()),
            "sources_modified": bool(cmd(["git", "-C", ROOT, "status", "--porcelain", "--", "Sources"]))}


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for p in list(procs):
            try:
                stop(p)
            except Exception:
                pass
