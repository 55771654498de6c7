#!/usr/bin/env bash
# scripts/test-python-versions.sh <buildroot> — the function profiler's tests on the other
# Pythons it has code paths for: 3.12 (sys.monitoring for every detail) and 3.13
# (sys.monitoring for builtins, the frame evaluation hook for Python functions). CI's
# python3 is 3.11; the others come from PATH (pythonX.Y) or pyenv's versions, and a version
# not found is skipped with a line saying so.
#
# Each gets a small venv, <buildroot>/venv-pyX.Y: pytest and the build tools, then
# stepwatch from this checkout (the extension built for that Python). torch is not
# installed (for 3.12/3.13 PyPI's wheel is a CUDA build of gigabytes): the tests that need it
# skip. PYTHONS="3.12 3.13" picks the versions.
set -euo pipefail
BUILDROOT=${1:?usage: scripts/test-python-versions.sh <buildroot>}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$BUILDROOT"
BUILDROOT=$(cd "$BUILDROOT" && pwd)

. "$ROOT/scripts/find-python.sh"

for v in ${PYTHONS:-3.12 3.13}; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        echo "test-python-versions.sh: no Python $v here (python$v on PATH or pyenv's): skipped"
        continue
    fi
    venv="$BUILDROOT/venv-py$v"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    # the constraints file keeps torch out, whatever a dependency asks
    echo "torch==2.13.0" > "$venv/stepwatch-constraints.txt"
    pip=("$venv/bin/python" -m pip install -q -c "$venv/stepwatch-constraints.txt")
    if [ "$(cat "$venv/.stepwatch-deps" 2>/dev/null)" != "v1" ]; then
        "${pip[@]}" pytest "scikit-build-core>=0.10" cmake ninja
        echo v1 > "$venv/.stepwatch-deps"
    fi
    "${pip[@]}" --no-build-isolation "$ROOT"
    echo "test-python-versions.sh: Python $("$venv/bin/python" -V 2>&1 | cut -d' ' -f2)"
    # from outside the checkout, so that `import stepwatch` is the installed package
    (cd "$BUILDROOT" && SW_SOURCE_DIR="$ROOT" SW_BUILD_DIR="$BUILDROOT/release" \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/python/test_functions.py")
done
