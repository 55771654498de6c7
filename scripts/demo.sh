#!/usr/bin/env bash
# scripts/demo.sh BUILD_ROOT — the main job (`make demo`): a real MLP trained in C on the
# stepwatch engine, profiled. Prints the reports and writes the report files under
# BUILD_ROOT/demo/. The release build is expected in BUILD_ROOT/release.
#   SW_MNIST_DIR=DIR   train on MNIST (gunzipped IDX files in DIR) instead of generated data
#   SW_DEMO_ARGS="..." extra train_mlp options (e.g. "--epochs 5 --delay-ms 5")
set -euo pipefail

root="${1:-build}"
bin="$root/release/examples/train_mlp"
cli="$root/release/stepwatch"
out="$root/demo"
if [ ! -x "$bin" ]; then
    echo "demo: $bin is not built (run 'make build' first)" >&2
    exit 1
fi
mkdir -p "$out"
run_file="$out/train_mlp.db"
rm -f "$run_file" "$run_file-wal" "$run_file-shm"

args=(--epochs 3 --delay-ms 2
      --json "$out/report.json"
      --csv "$out/ignite_iterations.csv"
      --handlers-csv "$out/ignite_handlers.csv"
      --run-file "$run_file" --timeline)
if [ -n "${SW_MNIST_DIR:-}" ]; then
    args+=(--mnist "$SW_MNIST_DIR")
fi
# shellcheck disable=SC2206
extra=(${SW_DEMO_ARGS:-})

"$bin" "${args[@]}" "${extra[@]}"

trace="$out/trace.json"
html="$out/report.html"
if [ -f "$run_file" ] && [ -x "$cli" ]; then
    echo
    echo "==== stepwatch diagnose ===="
    "$cli" diagnose "$run_file" || true
    "$cli" export "$run_file" --chrome "$trace"
    "$cli" html "$run_file" -o "$html"
fi

echo
echo "==== files ===="
echo "JSON report              $out/report.json"
echo "Ignite per-iteration CSV $out/ignite_iterations.csv"
echo "Ignite per-handler CSV   $out/ignite_handlers.csv"
if [ -f "$run_file" ]; then
    echo "run file (SQLite)        $run_file"
    [ -f "$trace" ] && echo "Chrome trace (Perfetto)  $trace"
    [ -f "$html" ] && echo "HTML report              $html"
    if [ -x "$cli" ]; then
        echo "  read it again:         $cli report $run_file --format fastxtend"
        echo "  compare two runs:      $cli compare A.db B.db"
    fi
fi
