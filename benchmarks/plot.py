#!/usr/bin/env python3
"""Sign-out-to-last-subscriber latency against K, both services: plot.py RESULTS.json OUT.png"""
import json, sys


def plot(R, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(3)
    ks = sorted(int(k) for k in R["signout"])
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    services = (("reference", "tab:blue"), ("durable_reference", "tab:green"), ("brokerd", "tab:orange"))
    for s, color in ((s, c) for s, c in services if s in R["signout"][str(ks[0])]):
        med = [R["signout"][str(k)][s]["p50_us"]["median"] / 1e3 for k in ks]
        lo = [R["signout"][str(k)][s]["p50_us"]["min"] / 1e3 for k in ks]
        hi = [R["signout"][str(k)][s]["p50_us"]["max"] / 1e3 for k in ks]
        ax.plot(ks, med, "o-", color=color, label=f"{s} (median of repetition p50s)")
        ax.fill_between(ks, lo, hi, color=color, alpha=0.2)
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xticks(ks); ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("subscribers K (connections with an AccountChanged match rule)")
    ax.set_ylabel("SignOut sent → last subscriber has the signal (ms)")
    ax.set_title("Sign-out fan-out latency" + (" (pinned)" if R["pinned"] else "") + "; band: min–max of repetitions")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)



if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        plot(json.load(f), sys.argv[2])
