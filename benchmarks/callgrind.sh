#!/usr/bin/env bash
# Instruction counts per call, brokerd vs the reference, under valgrind --tool=callgrind:
# stable on a noisy machine where wall-clock times are not.
#   benchmarks/callgrind.sh [CALLS] [METHOD]     (METHOD: gca (default), ats)
# Needs `make bench` (or run.py) to have built .build-bench first. Writes
# benchmarks/results/callgrind-{reference,brokerd}-METHOD.txt (callgrind_annotate, demangled).
set -euo pipefail
CALLS=${1:-2000}; METHOD=${2:-gca}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(dirname "$HERE")
BIN=$(cd "$ROOT" && swift build -c release --scratch-path .build-bench --show-bin-path)
CBIN=$ROOT/.build-bench/c
OUT=$HERE/results; WORK=$(mktemp -d -t brokerd-callgrind-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
wait_line() { timeout "$2" grep -m1 --line-buffered "^$3" <(tail --pid=$$ -n +1 -f "$1"); }

dbus-daemon --config-file="$HERE/bus.conf" --nofork --print-address=1 > "$WORK/bus" 2>/dev/null & PIDS+=($!)
BUS=$(wait_line "$WORK/bus" 10 unix:)
"$BIN/idp-sim" --port 0 --users "$ROOT/examples/demo-users.json" > "$WORK/idp" 2>/dev/null & PIDS+=($!)
AUTH="$(wait_line "$WORK/idp" 60 'listening on ' | sed 's/^listening on //')/contoso-demo/v2.0"

# valgrind cannot read the Swift toolchain's DWARF ("Possibly corrupted debuginfo"): run a copy
# without debug sections; the symbol table stays, so functions keep their names.
cp "$BIN/brokerd" "$WORK/brokerd"; strip --strip-debug "$WORK/brokerd"
CG="valgrind --tool=callgrind --dump-instr=no --collect-atstart=yes"
$CG --callgrind-out-file="$WORK/cg.brokerd" "$WORK/brokerd" --address "$BUS" --device-mode shared \
    --authority "$AUTH" --state-dir "$WORK/state" --token-storage plaintext-file > "$WORK/brokerd.out" 2>"$WORK/brokerd.err" & BPID=$!; PIDS+=($BPID)
wait_line "$WORK/brokerd.out" 120 "brokerd ready" > /dev/null || { cat "$WORK/brokerd.err" >&2; exit 1; }
echo alice-Demo-Passw0rd | "$BIN/brokerctl" sign-in --client-id mail-app --username alice@contoso.example \
    --password-stdin --scope User.Read --address "$BUS" > /dev/null
$CG --callgrind-out-file="$WORK/cg.reference" "$CBIN/reference" --address "$BUS" --name io.shareddevice.Reference1 \
    > "$WORK/ref.out" 2>"$WORK/ref.err" & RPID=$!; PIDS+=($RPID)
wait_line "$WORK/ref.out" 60 "reference ready" > /dev/null

measure() {  # name pid dest
    "$CBIN/busbench" latency --address "$BUS" --dest "$3" --method "$METHOD" -n 50 --warmup 0 > /dev/null
    callgrind_control -z "$2" > /dev/null
    "$CBIN/busbench" latency --address "$BUS" --dest "$3" --method "$METHOD" -n "$CALLS" --warmup 0 > /dev/null
    callgrind_control -d "$2" > /dev/null
    sleep 1
    local f; f=$(ls -t "$WORK"/cg."$1".* | head -1)
    local total; total=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
    { echo "# $1: $CALLS x $METHOD, total Ir $total, per call $((total / CALLS))"
      callgrind_annotate --inclusive=yes "$f" 2>/dev/null | head -80 | swift demangle --simplified 2>/dev/null || true
      echo; echo "# self cost"
      callgrind_annotate "$f" 2>/dev/null | head -60 | swift demangle --simplified 2>/dev/null || true
    } > "$OUT/callgrind-$1-$METHOD.txt"
    echo "$1 $METHOD: $((total / CALLS)) instructions per call (total $total over $CALLS calls)"
}
measure reference "$RPID" io.shareddevice.Reference1
measure brokerd "$BPID" io.shareddevice.Broker1
