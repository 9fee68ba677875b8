#!/usr/bin/env bash
# `make demo-gui`: the tutorial window twice, as two apps ("Mail" and "Calendar"), on your display,
# over a private session bus with idp-sim and brokerd in shared mode; `brokerctl watch` prints each
# AccountChanged here. Sign in in one window (alice@contoso.example, password alice-Demo-Passw0rd,
# or carol's emailed code: `curl -s $IDP/test/outbox`), watch the other follow, sign out in either.
# Ctrl-C stops everything this started.
set -euo pipefail

BIN_DIR=${BIN_DIR:?set BIN_DIR to the directory of brokerd, brokerctl and idp-sim}
WINDOW_BIN=${WINDOW_BIN:?set WINDOW_BIN to the directory of tutorial-window}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
    echo "demo-gui: no display (DISPLAY or WAYLAND_DISPLAY); run it in a desktop session" >&2
    exit 1
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Reads a child's standard output until a line starting with $2 (at most 30 s).
wait_line() {
    local file=$1 prefix=$2
    for _ in $(seq 300); do
        line=$(grep -m1 "^$prefix" "$file" 2>/dev/null || true)
        if [ -n "$line" ]; then echo "$line"; return 0; fi
        sleep 0.1
    done
    echo "demo-gui: no '$prefix' line in $file" >&2
    return 1
}

# A private bus with the session configuration (so the accessibility bus works too).
dbus-daemon --session --nofork --print-address=1 > "$WORK/bus" 2> "$WORK/bus.log" &
PIDS+=($!)
export DBUS_SESSION_BUS_ADDRESS=$(wait_line "$WORK/bus" "unix:")

"$BIN_DIR/idp-sim" --port 0 --users "$HERE/demo-users.json" > "$WORK/idp" 2> "$WORK/idp.log" &
PIDS+=($!)
IDP=$(wait_line "$WORK/idp" "listening on " | sed 's/^listening on //')

"$BIN_DIR/brokerd" --device-mode shared --token-storage memory --state-dir "$WORK/state" \
    --authority "$IDP/4f1c5a3e-8b2d-4c6f-9a7e-1d3b5c7e9f20/v2.0" > "$WORK/brokerd" 2> "$WORK/brokerd.log" &
PIDS+=($!)
wait_line "$WORK/brokerd" "brokerd ready:" > /dev/null

echo "idp-sim at $IDP (emailed codes: curl -s $IDP/test/outbox)"
echo "users: alice@contoso.example / alice-Demo-Passw0rd, carol@contoso.example (emailed code)"
"$WINDOW_BIN/tutorial-window" --app-name Mail --client-id mail-app &
PIDS+=($!)
"$WINDOW_BIN/tutorial-window" --app-name Calendar --client-id calendar-app &
PIDS+=($!)
echo "Two windows are open; each AccountChanged appears below. Ctrl-C ends the demo."
"$BIN_DIR/brokerctl" watch
