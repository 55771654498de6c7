#!/usr/bin/env bash
# scripts/fuzz.sh <buildroot> <seconds> — the libFuzzer targets (tests/fuzz): build them with
# clang (address + undefined sanitizers) in <buildroot>/fuzz, replay every regression input
# (tests/fuzz/regressions/<target>/: inputs that once crashed), then fuzz each target for
# <seconds> from the seed corpus (tests/fuzz/corpus/<target>/; what the fuzzer adds stays in
# <buildroot>/fuzz/corpus). A crash is saved to <buildroot>/fuzz/crashes/ and fails the run:
# turn it into a regression input and a test. `make test` runs a few seconds a target;
# `make fuzz` runs longer (FUZZ_SECONDS).
set -uo pipefail
BUILDROOT=${1:?usage: scripts/fuzz.sh <buildroot> <seconds>}
SECONDS_EACH=${2:?usage: scripts/fuzz.sh <buildroot> <seconds>}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$BUILDROOT"
BUILDROOT=$(cd "$BUILDROOT" && pwd)
CLANG=${FUZZ_CC:-clang}
if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "fuzz.sh: SKIPPED: no $CLANG (install clang and libclang-rt-dev, as .ci/run does)"
    exit 0
fi
echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' >"$BUILDROOT/fuzz-probe.c"
if ! "$CLANG" -fsanitize=fuzzer "$BUILDROOT/fuzz-probe.c" -o "$BUILDROOT/fuzz-probe" 2>/dev/null; then
    echo "fuzz.sh: SKIPPED: $CLANG cannot link -fsanitize=fuzzer (install libclang-rt-dev)"
    exit 0
fi
OUT="$BUILDROOT/fuzz"
CC="$CLANG" cmake -S "$ROOT" -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSW_SANITIZE=address,undefined -DSW_BUILD_FUZZ=ON -DSW_BUILD_TESTS=OFF \
    -DSW_BUILD_BENCH=OFF -DSW_BUILD_EXAMPLES=OFF -DSW_BUILD_CLI=OFF >/dev/null || exit 1
cmake --build "$OUT" -j "${JOBS:-2}" >/dev/null || exit 1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$OUT/crashes"
failed=0
for target in fuzz_run_file fuzz_run_rows fuzz_schema fuzz_merge fuzz_decode fuzz_idx fuzz_cli_args; do
    bin="$OUT/tests/fuzz/$target"
    regressions="$ROOT/tests/fuzz/regressions/$target"
    if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
        if ! "$bin" "$regressions"/* >"$OUT/$target.replay.log" 2>&1; then
            echo "fuzz.sh: $target: a regression input crashes again ($OUT/$target.replay.log)"
            failed=1
            continue
        fi
    fi
    corpus="$OUT/corpus/$target"
    mkdir -p "$corpus"
    # Crafted schemas must be read in bounded memory and time (docs/reliability.md).
    limits="-timeout=25 -rss_limit_mb=2048"
    [ "$target" = fuzz_schema ] && limits="-timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=512"
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$SECONDS_EACH" $limits -max_len=65536 \
        -close_fd_mask=1 -print_final_stats=1 -artifact_prefix="$OUT/crashes/$target-" \
        "$corpus" "$ROOT/tests/fuzz/corpus/$target" >"$OUT/$target.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/$target.log" | tail -1)
    edges=$(grep -o 'cov: [0-9]*' "$OUT/$target.log" | tail -1)
    if [ "$rc" -ne 0 ]; then
        echo "fuzz.sh: $target: CRASH after ${runs:-?} runs (see $OUT/$target.log, $OUT/crashes/)"
        grep -m3 -E 'ERROR|runtime error|SUMMARY' "$OUT/$target.log"
        failed=1
    else
        echo "fuzz.sh: $target: ${runs:-?} runs in ${SECONDS_EACH} s, $edges, no crash"
    fi
done
rm -f "$BUILDROOT/fuzz-probe" "$BUILDROOT/fuzz-probe.c"
exit "$failed"
