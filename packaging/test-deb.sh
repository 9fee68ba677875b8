#!/usr/bin/env bash
# The package test (`make deb-test`): the .deb `make deb` built is checked with lintian (no
# errors), installed with its dependencies, started by D-Bus activation on a private bus before
# anyone configured a provider (it answers, saying which file to edit) and again once the
# administrator's file names one, asked for the device information with the installed brokerctl,
# upgraded to a newer build with its
# conffile changed by the administrator (the change is kept), and purged (nothing left in /etc).
# It installs a package: it needs root, and refuses to touch a machine where the package or
# /etc/shared-device-broker already is.
#
#   packaging/test-deb.sh INSTALL_BIN DEB_DIR DEBUG_BIN
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: test-deb.sh INSTALL_BIN DEB_DIR DEBUG_BIN}
DEBS=${2:?usage: test-deb.sh INSTALL_BIN DEB_DIR DEBUG_BIN}
DEBUG_BIN=${3:?usage: test-deb.sh INSTALL_BIN DEB_DIR DEBUG_BIN}
VERSION=$(cat VERSION)
ARCH=$(dpkg --print-architecture)
DEB=$DEBS/shared-device-broker_${VERSION}_${ARCH}.deb
PACKAGE=shared-device-broker
CONF=/etc/shared-device-broker/broker.conf
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
WORK=$(mktemp -d)
PIDS=()
failures=0
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok - $what"; else echo "not ok - $what"; failures=$((failures + 1)); fi
}

if dpkg-query -W -f='${Status}' "$PACKAGE" 2>/dev/null | grep -q installed || [ -e /etc/shared-device-broker ]; then
    echo "deb-test: $PACKAGE or /etc/shared-device-broker is already on this machine; not touching it" >&2
    exit 2
fi
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    $SUDO dpkg --purge "$PACKAGE" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

command -v lintian >/dev/null || { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian >/dev/null; }
# lintian's view, every tag shown; errors fail the test.
lintian --tag-display-limit 0 "$DEB" > "$WORK/lintian" 2>&1 || true
sed 's/^/  lintian: /' "$WORK/lintian"
check "lintian reports no errors" bash -c "! grep -q '^E: ' '$WORK/lintian'"

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$(readlink -f "$DEB")" >/dev/null
check "installed: /usr/bin/brokerd and the activation file" test -x /usr/bin/brokerd -a \
    -f /usr/share/dbus-1/services/io.shareddevice.Broker1.service
check "the manual pages are installed" test -f /usr/share/man/man5/broker.conf.5.gz
# Every page a shipped page links to is shipped too (compressed, beside it).
check "every .md and image the shipped docs link to is shipped" /usr/bin/python3 -c '
import gzip, os, re, sys
doc = "/usr/share/doc/shared-device-broker"
missing = []
for folder, _, files in os.walk(doc):
    for name in files:
        if not name.endswith(".md.gz"):
            continue
        text = gzip.open(os.path.join(folder, name), "rt").read()
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" in target or not target.endswith((".md", ".png")):
                continue
            path = os.path.normpath(os.path.join(folder, target))
            if not (os.path.exists(path) or os.path.exists(path + ".gz")):
                missing.append(name + " -> " + target)
print("\n".join("  missing: " + m for m in missing))
sys.exit(1 if missing else 0)
'
check "brokerd --version says $VERSION" test "$(/usr/bin/brokerd --version)" = "$VERSION"
check "brokerctl --version says $VERSION" test "$(/usr/bin/brokerctl --version)" = "$VERSION"

# A private bus that starts brokerd (and a Secret Service) from the installed activation files,
# with a home of its own: what it starts never sees the machine's own keyrings.
start_bus() { # start_bus NAME: sets ADDRESS
    local dir=$WORK/$1
    mkdir -p "$dir/home" "$dir/state" && mkdir -m 700 "$dir/run"
    cat > "$dir/bus.conf" <<CONFIG
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=$dir/bus</listen>
  <auth>EXTERNAL</auth>
  <servicedir>/usr/share/dbus-1/services</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/>
  </policy>
</busconfig>
CONFIG
    env HOME="$dir/home" XDG_STATE_HOME="$dir/state" XDG_RUNTIME_DIR="$dir/run" \
        XDG_DATA_HOME="$dir/home/.local/share" XDG_CONFIG_HOME="$dir/home/.config" \
        dbus-daemon --config-file="$dir/bus.conf" --nofork --print-address > "$dir/address" 2> "$dir/bus.log" &
    PIDS+=($!)
    for _ in $(seq 200); do [ -s "$dir/address" ] && break; sleep 0.05; done
    ADDRESS=unix:path=$dir/bus
}
# Stops what the bus started (its brokerd and Secret Service), then the bus.
stop_bus() {
    local name pid
    for name in io.shareddevice.Broker1 org.freedesktop.secrets; do
        pid=$(dbus-send --bus="$ADDRESS" --print-reply=literal --dest=org.freedesktop.DBus /org/freedesktop/DBus \
            org.freedesktop.DBus.GetConnectionUnixProcessID "string:$name" 2>/dev/null | awk '{print $2}') || true
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
    kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
}

# The first run of a fresh install: the conffile as shipped names no provider yet, and the
# Secret Service has no keyring. brokerd starts anyway, says what to configure, and where.
start_bus first
info=$(/usr/bin/brokerctl device-info --json --address "$ADDRESS" 2>&1) || true
echo "$info" | sed 's/^/  brokerctl: /'
check "first run, no provider configured: activation starts brokerd, which answers device-info" \
    grep -q "\"brokerVersion\" *: *\"$VERSION\"" <<<"$info"
check "first run: device-info says no provider is configured and which file to edit" \
    grep -q "providerNotConfigured.*$CONF" <<<"$info"
refused=$(echo secret | /usr/bin/brokerctl sign-in --client-id mail-app --username alice@contoso.example \
    --password-stdin --address "$ADDRESS" 2>&1) || true
echo "$refused" | sed 's/^/  brokerctl: /'
check "first run: a sign-in gets NotConfigured naming $CONF" \
    grep -q "Error.NotConfigured.*$CONF" <<<"$refused"
stop_bus

# A provider, and the administrator's file naming it (the conffile, changed).
"$DEBUG_BIN/idp-sim" --port 0 --users examples/demo-users.json > "$WORK/idp" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do grep -q '^listening on ' "$WORK/idp" && break; sleep 0.05; done
IDP=$(sed -n 's/^listening on //p' "$WORK/idp")
echo "{\"deviceMode\": \"shared\", \"authority\": \"$IDP/contoso-demo/v2.0\", \"tokenStorage\": \"memory\"}" |
    $SUDO tee "$CONF" >/dev/null

start_bus configured
info=$(/usr/bin/brokerctl device-info --json --address "$ADDRESS" 2>&1) || true
echo "$info" | sed 's/^/  brokerctl: /' 
check "D-Bus activation starts the installed brokerd, which answers brokerctl" \
    grep -q "\"brokerVersion\" *: *\"$VERSION\"" <<<"$info"
check "the installed brokerd reads the administrator's file" grep -q "$IDP/contoso-demo/v2.0" <<<"$info"
stop_bus

# Upgrade to a newer build: the administrator's change to the conffile stays.
NEWER=$VERSION+test1
bash packaging/build-deb.sh "$BIN" "$WORK/newer" "$NEWER" >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive dpkg -i "$WORK/newer/${PACKAGE}_${NEWER}_${ARCH}.deb" >/dev/null
check "upgraded to $NEWER" test "$(dpkg-query -W -f='${Version}' "$PACKAGE")" = "$NEWER"
check "the changed conffile is kept across the upgrade" grep -q "$IDP/contoso-demo/v2.0" "$CONF"

$SUDO dpkg --purge "$PACKAGE" >/dev/null
check "purged: no brokerd, nothing in /etc" bash -c "! test -e /usr/bin/brokerd && ! test -e /etc/shared-device-broker"

echo "# package test: $failures failed"
[ "$failures" = 0 ]
