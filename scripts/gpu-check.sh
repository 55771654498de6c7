#!/usr/bin/env bash
# scripts/gpu-check.sh [WHEEL] [OUT.json] — `make gpu-check`: device time on a real GPU
# (scripts/gpu_check.py; docs/device.md, "GPU check"). One prepared run of about 6 minutes
# at most: a table on stdout, JSON in OUT (default gpu-check.json). Exit 0 when every case
# passed, 1 when one failed; "no GPU: skipped" and 0 on a machine without one.
#
# A GPU machine may have no network and no build tools: with WHEEL (a stepwatch wheel made
# here, for its Python) it is installed with `pip install --no-index --no-deps --target` into
# a scratch folder put first on PYTHONPATH, and nothing else is needed (torch with CUDA, and
# nvidia-smi for the NVML case, are the machine's). Without WHEEL, the importable stepwatch.
# PYTHON picks the interpreter (default python3).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WHEEL=${1:-}
OUT=${2:-gpu-check.json}
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: no GPU: skipped (no nvidia-smi)"
    exit 0
fi
if [ -n "$WHEEL" ]; then
    target=$(mktemp -d /tmp/stepwatch-gpu-check.XXXXXX)
    trap 'rm -rf "$target"' EXIT
    if ! "$PY" -m pip install -q --no-index --no-deps --target "$target" "$WHEEL"; then
        echo "gpu-check: could not install $WHEEL" >&2
        exit 2
    fi
    export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
fi
# Started from outside the checkout: `import stepwatch` is the installed one, not python/.
cd /tmp && "$PY" "$ROOT/scripts/gpu_check.py" --out "$OUT"
