#!/usr/bin/env bash
# Coverage-guided fuzzing of one parser of outside data with libFuzzer.
#
#   fuzz/run.sh TARGET [SECONDS]    fuzz TARGET for SECONDS (default $FUZZ_SECONDS, else 60)
#   fuzz/run.sh TARGET replay       run the seed corpus and fuzz/regressions/TARGET once, no fuzzing
#
# Targets: json token jwt jwks discovery statefile redirect msbroker config sharedsignals (see fuzz/README.md).
# Builds first (fuzz/build.sh; FUZZ_SKIP_BUILD=1 to skip). Runs libFuzzer in fork mode, so a crash
# is recorded and fuzzing goes on; the corpus grows in $FUZZ_SCRATCH/fuzz/corpus/TARGET (seeded
# from fuzz/corpus/TARGET) and crash inputs land in $FUZZ_SCRATCH/fuzz/artifacts/TARGET. Prints
# one summary line; exits 1 when the run found a crash, a hang (timeout) or an out-of-memory.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:?usage: fuzz/run.sh TARGET [SECONDS|replay]}
DURATION=${2:-${FUZZ_SECONDS:-60}}
SCRATCH=${FUZZ_SCRATCH:-.build-fuzz}
OUT=$SCRATCH/fuzz
BIN=$OUT/bin/$TARGET
SEEDS=fuzz/corpus/$TARGET
REGRESSIONS=fuzz/regressions/$TARGET
WORK=$OUT/corpus/$TARGET
ARTIFACTS=$OUT/artifacts/$TARGET
[ -d "$SEEDS" ] || { echo "fuzz: no target $TARGET (fuzz/corpus/ has: $(ls fuzz/corpus | tr '\n' ' '))" >&2; exit 2; }
[ "${FUZZ_SKIP_BUILD:-0}" = 1 ] || bash fuzz/build.sh "$TARGET"
mkdir -p "$WORK" "$ARTIFACTS"
export SWIFT_BACKTRACE=enable=no   # libFuzzer prints the stack; Swift's own backtracer only slows crashes down

case $TARGET in
    statefile) MAX_LEN=16384 ;;
    *) MAX_LEN=8192 ;;
esac

if [ "$DURATION" = replay ]; then
    inputs=("$SEEDS")
    [ -d "$REGRESSIONS" ] && inputs+=("$REGRESSIONS")
    echo "fuzz: replaying ${inputs[*]} through $TARGET"
    "$BIN" -runs=0 -timeout=10 -artifact_prefix="$OUT/replay-$TARGET-" "${inputs[@]}"
    exit $?
fi

LOG=$OUT/$TARGET.log
STAMP=$OUT/.$TARGET.start
touch "$STAMP"
echo "fuzz: $TARGET for ${DURATION}s (log: $LOG)"
status=0
"$BIN" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$DURATION" -timeout=10 -rss_limit_mb=2048 -max_len="$MAX_LEN" -use_value_profile=1 \
    -dict=fuzz/dict/json.dict -artifact_prefix="$ARTIFACTS/" -print_final_stats=1 \
    "$WORK" "$SEEDS" >"$LOG" 2>&1 || status=$?

# The last progress line of fork mode: "#EXECS: cov: C ft: F corp: N exec/s: E oom/timeout/crash: O/T/X time: S job: J ..."
last=$(grep -E '^#[0-9]+: cov:' "$LOG" | tail -1 || true)
if [ -z "$last" ]; then
    tail -30 "$LOG"
    echo "fuzz: $TARGET did not run (status $status)" >&2
    exit 1
fi
execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
cov=$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<<"$last")
ft=$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<<"$last")
corp=$(sed -E 's/.* corp: ([0-9]+).*/\1/' <<<"$last")
problems=$(sed -E 's#.* oom/timeout/crash: ([0-9]+/[0-9]+/[0-9]+).*#\1#' <<<"$last")
elapsed=$(sed -E 's/.* time: ([0-9]+)s.*/\1/' <<<"$last")
rate=$(( execs / (elapsed > 0 ? elapsed : 1) ))
echo "fuzz: $TARGET: ${elapsed}s, $execs executions ($rate/s), cov $cov, ft $ft, corpus $corp, oom/timeout/crash $problems"

# Each crash input replayed once; crashes listed once per cause (message and place), with a count.
found=0
causes=$OUT/.$TARGET.causes
: >"$causes"
for artifact in $(find "$ARTIFACTS" -type f -newer "$STAMP" | sort); do
    found=$((found + 1))
    replay=$("$BIN" -runs=1 -artifact_prefix="$OUT/replay-$TARGET-" "$artifact" 2>&1 || true)
    # What went wrong (a Swift fatal error, a broken invariant, libFuzzer's verdict) and where:
    # the first frame in this project's sources.
    what=$(grep -m1 -oE 'Fatal error.*|fuzz invariant violated.*|ERROR: libFuzzer: [a-z -]+' <<<"$replay" || echo "crash")
    where=$(grep -m1 -oE '(Sources|fuzz)/[A-Za-z0-9_/+.-]+\.swift:[0-9]+' <<<"$replay" || echo "?")
    echo "$what at $where|$artifact" >>"$causes"
done
if [ "$found" != 0 ]; then
    cut -d'|' -f1 "$causes" | sort | uniq -c | while read -r count cause; do
        example=$(grep -F -m1 "$cause|" "$causes" | cut -d'|' -f2)
        echo "fuzz:   $count x $cause (e.g. $example)"
    done
    echo "fuzz: $TARGET: $found input(s) that crash, hang or exhaust memory, in $ARTIFACTS; replay one with $BIN FILE"
    exit 1
fi
