#!/usr/bin/env bash
# The multi-app sign-out demo (`make demo`): a private session bus, idp-sim and brokerd in shared
# mode, and three apps, Mail, Calendar and Notes, each its own process (examples/DemoApp).
# Mail signs alice in and all three show her; Calendar signs out and all three show the sign-out,
# each with the time the AccountChanged signal took to reach it. The orchestrator
# (examples/MultiAppDemo) exits 0 only when every app saw every change, and stops everything it
# started, on failure and on Ctrl-C too.
#
# BIN_DIR: where the built binaries are (brokerd, idp-sim, the apps); without it the script asks
# `swift build --show-bin-path`, which needs this package's directory and the Swift toolchain.
set -euo pipefail

BIN_DIR=${BIN_DIR:-$(swift build --show-bin-path)}
HERE=$(cd "$(dirname "$0")" && pwd)
exec "$BIN_DIR/multi-app-demo" --bin-dir "$BIN_DIR" --users "$HERE/demo-users.json" "$@"
