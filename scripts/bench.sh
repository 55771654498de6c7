#!/usr/bin/env bash
# scripts/bench.sh BUILD_ROOT — `make bench`: every benchmark, side by side with its anchor in
# the same run. Prints one table per benchmark; figures as JSON under BUILD_ROOT/bench/, then
# docs/overhead.md written from them (bench/write_overhead_doc.py).
set -euo pipefail
root="${1:-build}"
rel="$root/release"
out="$root/bench"
mkdir -p "$out"

echo "== C core: hot path against the clock it reads, memory over 10^7 spans =="
"$rel/bench/bench_core" "$out/core.json"

if [ -x "$rel/bench/bench_device" ]; then
    echo
    echo "== device layer: sampler CPU at 2 Hz, one read, device-time bookkeeping per step =="
    # the fake CUDA runtime of tests/device/ stands in for libcudart where it is built
    fake="$rel/tests/libfake_cudart.so"
    if [ -f "$fake" ]; then
        STEPWATCH_CUDART="$fake" "$rel/bench/bench_device" "$out/device.json"
    else
        "$rel/bench/bench_device" "$out/device.json"
    fi
fi

if [ -x "$rel/bench/bench_journal" ]; then
    echo
    echo "== run file: flusher CPU at 10^5 events/s, bytes per step =="
    "$rel/bench/bench_journal" "$out/journal.json"
fi

if [ -x "$rel/bench/bench_compare" ]; then
    echo
    echo "== compare: time as actions grow (n log n), beside report of the same snapshot =="
    "$rel/bench/bench_compare" "$out/compare.json"
fi

if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_python.py ]; then
    echo
    echo "== Python: the cost of a with on an action, against Lightning's =="
    SW_BUILD_DIR="$rel" "$root/venv/bin/python" bench/bench_python.py --out "$out/python.json"
fi
if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_torch.py ]; then
    echo
    echo "== torch: instrument() per step, against its floor and torch.profiler =="
    "$root/venv/bin/python" bench/bench_torch.py --out "$out/torch.json"
fi
if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_html.py ] && command -v chromium >/dev/null; then
    echo
    echo "== HTML report: page size and open time in Chromium, 10^3 and 10^6 steps =="
    "$root/venv/bin/python" bench/bench_html.py --out "$out/html.json"
fi
if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_ranks.py ]; then
    echo
    echo "== many ranks: rank 0 reducing N ranks' payloads into the cross-rank view =="
    # SW_BENCH_BEFORE_LIB: another build's libstepwatch.so, timed beside in the same run
    # (SW_BENCH_BEFORE_LABEL: which build it is); with valgrind, the instructions too
    "$root/venv/bin/python" bench/bench_ranks.py --out "$out/ranks.json" \
        ${SW_BENCH_BEFORE_LIB:+--before "$SW_BENCH_BEFORE_LIB"} \
        ${SW_BENCH_BEFORE_LABEL:+--before-label "$SW_BENCH_BEFORE_LABEL"} \
        $(command -v valgrind >/dev/null && echo --instructions)
    echo
    echo "== many ranks: the end-of-run round and the clock offsets, 1,000 simulated ranks =="
    "$root/venv/bin/python" bench/bench_ranks_round.py --out "$out/ranks_round.json"
fi
for fw in ignite fastai; do
    if [ -x "$root/venv/bin/python" ] && [ -f "bench/bench_$fw.py" ]; then
        echo
        echo "== $fw: the profilers' per-step overhead against the framework's own =="
        "$root/venv/bin/python" "bench/bench_$fw.py" --out "$out/$fw.json"
    fi
done
if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_functions.py ]; then
    echo
    echo "== Python: function profiling slowdown against cProfile at the same detail =="
    "$root/venv/bin/python" bench/bench_functions.py --out "$out/functions.json"
fi

if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_lightning.py ]; then
    echo
    echo "== Lightning: per-step overhead in a real Trainer.fit, side by side =="
    "$root/venv/bin/python" bench/bench_lightning.py --out "$out/lightning.json"
fi
if [ -x "$root/venv/bin/python" ] && [ -f bench/bench_instructions.py ]; then
    echo
    echo "== instructions added per step in situ (callgrind), every adapter against its peer =="
    SW_BUILD_DIR="$rel" "$root/venv/bin/python" bench/bench_instructions.py \
        --out "$out/instructions.json"
fi
echo
echo "figures written to $out/"
# docs/overhead.md: one table per group from that JSON, the last figures beside the new ones
py="$root/venv/bin/python"
[ -x "$py" ] || py=python3
"$py" bench/write_overhead_doc.py --bench "$out"
