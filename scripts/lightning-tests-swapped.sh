#!/usr/bin/env bash
# scripts/lightning-tests-swapped.sh <lightning tests dir> [python] — Lightning's own
# ThroughputMonitor and Throughput tests run against stepwatch.lightning with only the import
# swapped (issue 40; docs/efficiency.md): first as Lightning wrote them (their code), then with
# the import swapped, then also with the get_available_flops mock aimed at stepwatch's module
# (the tests patch Lightning's module path, which stepwatch's callback does not read).
# The tests dir is Lightning's tests/ (tag 2.6.5: tests_pytorch/, tests_fabric/); it is copied,
# never changed.
set -euo pipefail
SRC=${1:?usage: scripts/lightning-tests-swapped.sh <lightning tests dir> [python]}
PY=${2:-build/venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -r "$SRC/tests_pytorch" "$SRC/tests_fabric" "$WORK/"
cd "$WORK"
PT=tests_pytorch/callbacks/test_throughput_monitor.py
FT=tests_fabric/utilities/test_throughput.py
sed -e 's/^from lightning.fabric.utilities.throughput import measure_flops$/from stepwatch.lightning import measure_flops/' \
    -e 's/^from lightning.pytorch.callbacks.throughput_monitor import ThroughputMonitor$/from stepwatch.lightning import ThroughputMonitor/' \
    "$PT" > tests_pytorch/callbacks/test_throughput_monitor_sw.py
sed -e 's/lightning.pytorch.callbacks.throughput_monitor.get_available_flops/stepwatch.lightning_throughput.get_available_flops/' \
    tests_pytorch/callbacks/test_throughput_monitor_sw.py > tests_pytorch/callbacks/test_throughput_monitor_sw_mock.py
"$PY" - "$FT" <<'PYEOF'
import sys
path = sys.argv[1]
text = open(path).read()
old = """from lightning.fabric.utilities.throughput import (
    Throughput,
    ThroughputMonitor,
    _MonotonicWindow,
    get_available_flops,
    measure_flops,
)"""
assert old in text, "Lightning's import block changed: swap it by hand"
text = text.replace(old, "from lightning.fabric.utilities.throughput import ThroughputMonitor, "
                         "_MonotonicWindow\nfrom stepwatch.lightning import Throughput, "
                         "get_available_flops, measure_flops")
open(path.replace(".py", "_sw.py"), "w").write(text)
PYEOF
run() { echo "== $*"; "$PY" -m pytest -q -p no:cacheprovider -rfx "$@" 2>&1 | grep -E "^(FAILED|XFAIL)|passed|failed" | cut -c1-160 || true; }
run "$PT" "$FT"
run tests_pytorch/callbacks/test_throughput_monitor_sw.py tests_fabric/utilities/test_throughput_sw.py
run tests_pytorch/callbacks/test_throughput_monitor_sw_mock.py
