#!/usr/bin/env bash
# The broker slice, end to end, on a private session bus:
#   idp-sim (a local OpenID Connect provider) and brokerd in shared mode;
#   Mail signs alice in with a password; Mail and Calendar both see her;
#   Calendar signs out; Mail sees the sign-out (current none, previous alice).
# Everything started here is stopped on exit. Run it with `make demo`.
set -euo pipefail

BIN_DIR=${BIN_DIR:-$(swift build --show-bin-path)}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d -t sdb-demo-XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Waits (at most $2 seconds) for a line starting with $3 in file $1, and prints it.
wait_for_line() {
    local file=$1 seconds=$2 prefix=$3
    if ! timeout "$seconds" grep -m1 --line-buffered "^$prefix" <(tail --pid=$$ -n +1 -f "$file"); then
        echo "demo: gave up waiting for \"$prefix\" in $file:" >&2
        cat "$file" >&2
        exit 1
    fi
}

say "A private session bus"
dbus-daemon --session --nofork --nopidfile --print-address=1 > "$WORK/bus.out" 2> "$WORK/bus.log" &
PIDS+=($!)
BUS=$(wait_for_line "$WORK/bus.out" 10 unix:)
export DBUS_SESSION_BUS_ADDRESS=$BUS
echo "$BUS"

say "idp-sim, a local OpenID Connect provider"
"$BIN_DIR/idp-sim" --port 0 --users "$HERE/demo-users.json" > "$WORK/idp.out" 2> "$WORK/idp.log" &
PIDS+=($!)
IDP=$(wait_for_line "$WORK/idp.out" 60 "listening on " | sed 's/^listening on //')
AUTHORITY="$IDP/contoso-demo/v2.0"
echo "authority: $AUTHORITY"

say "brokerd in shared mode"
"$BIN_DIR/brokerd" --device-mode shared --authority "$AUTHORITY" --state-dir "$WORK/state" \
    > "$WORK/brokerd.out" 2> "$WORK/brokerd.log" &
PIDS+=($!)
wait_for_line "$WORK/brokerd.out" 30 "brokerd ready:"
"$BIN_DIR/brokerctl" device-info

say "A watcher prints every AccountChanged signal"
"$BIN_DIR/brokerctl" watch > "$WORK/watch.out" &
PIDS+=($!)
wait_for_line "$WORK/watch.out" 10 "watching" > /dev/null

say "Mail signs alice in with her password"
echo "alice-Demo-Passw0rd" | "$BIN_DIR/brokerctl" sign-in --client-id mail-app \
    --username alice@contoso.example --password-stdin --scope User.Read

say "Mail and Calendar both see alice"
echo "-- Mail:";     "$BIN_DIR/brokerctl" current-account --client-id mail-app
echo "-- Calendar:"; "$BIN_DIR/brokerctl" current-account --client-id calendar-app

say "Calendar signs out: the whole device signs out"
"$BIN_DIR/brokerctl" sign-out --client-id calendar-app

say "Mail sees the sign-out (current none, previous alice)"
"$BIN_DIR/brokerctl" current-account --client-id mail-app

say "What the watcher saw"
wait_for_line "$WORK/watch.out" 10 "signed-out:" > /dev/null
cat "$WORK/watch.out"

say "Done: one sign-in from Mail, one sign-out from Calendar, and every app agrees."
echo
