#!/usr/bin/env bash
# scripts/test-python.sh <buildroot> — run the Python tests (tests/python) with the venv at
# <buildroot>/venv (made by scripts/venv.sh). SW_BUILD_DIR=<buildroot>/release lets the tests
# find the C command at $SW_BUILD_DIR/stepwatch. pytest's "no tests collected" (exit 5) is a
# failure too: a test run that ran nothing proves nothing.
set -uo pipefail
BUILDROOT=${1:?usage: scripts/test-python.sh <buildroot>}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILDROOT=$(cd "$BUILDROOT" && pwd)
PY="$BUILDROOT/venv/bin/python"
if [ ! -x "$PY" ]; then
    echo "test-python.sh: no venv at $BUILDROOT/venv (run scripts/venv.sh $BUILDROOT/venv)" >&2
    exit 1
fi
export SW_BUILD_DIR="$BUILDROOT/release"
export SW_SOURCE_DIR="$ROOT"
# Run from outside the checkout so `import stepwatch` is the installed package, not python/.
cd "$BUILDROOT"
"$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/python" "${@:2}"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test-python.sh: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
