#!/usr/bin/env bash
# Builds the libFuzzer harnesses in fuzz/harness/ with swiftc -sanitize=fuzzer, without any
# target in Package.swift: SwiftPM builds the dependencies (swift build --product brokerd),
# then JSON, BrokerCore, Identity, BrokerPersistence and BrokerDaemon are compiled again from
# Sources/ with coverage instrumentation, and each harness is linked with them and with SwiftPM's objects for the rest.
#
#   fuzz/build.sh [TARGET...]      (default: all targets)
#
# Environment: FUZZ_SCRATCH (default .build-fuzz), SWIFT (default swift),
#              FUZZ_SKIP_SWIFT_BUILD=1 to reuse the scratch directory as it is,
#              FUZZ_SANITIZE (default fuzzer; e.g. fuzzer,address).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRATCH=${FUZZ_SCRATCH:-.build-fuzz}
SCRATCH=$(cd "$(dirname "$SCRATCH")" && pwd)/$(basename "$SCRATCH")
SWIFT=${SWIFT:-swift}
SWIFTC=${SWIFTC:-$(dirname "$(command -v "$SWIFT")")/swiftc}
SANITIZE=${FUZZ_SANITIZE:-fuzzer}
ALL_TARGETS="json token jwt jwks discovery statefile redirect msbroker config sharedsignals"
TARGETS=${*:-$ALL_TARGETS}
OUT=$SCRATCH/fuzz
mkdir -p "$OUT/mod" "$OUT/obj" "$OUT/bin"

if [ "${FUZZ_SKIP_SWIFT_BUILD:-0}" != 1 ]; then
    # Another build may touch the tree meanwhile ("modified during the build"): one retry.
    "$SWIFT" build --scratch-path "$SCRATCH" --product brokerd >"$OUT/swift-build.log" 2>&1 \
        || "$SWIFT" build --scratch-path "$SCRATCH" --product brokerd >"$OUT/swift-build.log" 2>&1 \
        || { cat "$OUT/swift-build.log"; exit 1; }
fi

# BrokerDaemon sees every module map the others need (CDBus, CCurl, the crypto shims).
mapfile -t FLAGS < <(python3 fuzz/swiftargs.py flags "$SCRATCH" BrokerDaemon)
# The product's objects, except the modules rebuilt here with instrumentation (and what only brokerd needs).
mapfile -t OBJECTS < <(python3 fuzz/swiftargs.py objects "$SCRATCH" brokerd \
    JSON BrokerCore Identity BrokerPersistence BrokerDaemon brokerd ArgumentParser ArgumentParserToolInfo)
mapfile -t LINK < <(python3 fuzz/swiftargs.py linkflags "$SCRATCH" brokerd)
COMMON=(-I "$OUT/mod" "${FLAGS[@]}" -O -g -parse-as-library -sanitize="$SANITIZE")

# An instrumented library module, rebuilt only when a source is newer than its object.
module() {
    local name=$1; shift
    local object=$OUT/obj/$name.o
    local stale=0
    [ -f "$object" ] || stale=1
    for source in "$@"; do [ "$source" -nt "$object" ] && stale=1; done
    if [ "$stale" = 1 ]; then
        echo "fuzz: compiling $name (instrumented)"
        "$SWIFTC" -module-name "$name" -emit-module -emit-module-path "$OUT/mod/$name.swiftmodule" \
            -enable-testing -wmo -c "$@" -o "$object" "${COMMON[@]}"
    fi
}
# Every source of a target, its subfolders included (as SwiftPM takes them).
sources() { find "Sources/$1" -name '*.swift' | LC_ALL=C sort; }
module JSON $(sources JSON)
module BrokerCore $(sources BrokerCore)
# Each depends on the one before: rebuild it whenever that one was.
for dependency in BrokerCore JSON; do
    [ "$OUT/obj/$dependency.o" -nt "$OUT/obj/Identity.o" ] && rm -f "$OUT/obj/Identity.o"
    [ "$OUT/obj/$dependency.o" -nt "$OUT/obj/BrokerPersistence.o" ] && rm -f "$OUT/obj/BrokerPersistence.o"
done
module Identity $(sources Identity)
module BrokerPersistence $(sources BrokerPersistence)
[ "$OUT/obj/Identity.o" -nt "$OUT/obj/BrokerDaemon.o" ] && rm -f "$OUT/obj/BrokerDaemon.o"
[ "$OUT/obj/BrokerPersistence.o" -nt "$OUT/obj/BrokerDaemon.o" ] && rm -f "$OUT/obj/BrokerDaemon.o"
module BrokerDaemon $(sources BrokerDaemon)

for target in $TARGETS; do
    [ -f "fuzz/harness/$target.swift" ] || { echo "fuzz: no target $target (targets: $ALL_TARGETS)" >&2; exit 2; }
    echo "fuzz: linking $target"
    "$SWIFTC" -module-name "Fuzz_$target" fuzz/harness/Support.swift "fuzz/harness/$target.swift" \
        "$OUT/obj/JSON.o" "$OUT/obj/BrokerCore.o" "$OUT/obj/Identity.o" "$OUT/obj/BrokerPersistence.o" "$OUT/obj/BrokerDaemon.o" \
        "${OBJECTS[@]}" "${LINK[@]}" \
        "${COMMON[@]}" -o "$OUT/bin/$target"
done
