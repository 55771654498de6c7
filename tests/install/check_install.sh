#!/bin/sh
# check_install.sh BUILD_DIR SOURCE_DIR WORK_DIR — install stepwatch into a fresh prefix, then
# build a user's program against it: with pkg-config, and with find_package(stepwatch) under
# every CMake at hand (the one in PATH, Debian's /usr/bin/cmake, the test venv's), so a
# package exported by one CMake is checked with the others. Then the .pc file that an install
# into /usr (multiarch libdir) and /usr/local would get.
set -eu
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
passed=0
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(ls -d "$work"/prefix/lib*/pkgconfig | head -n 1)
export PKG_CONFIG_PATH="$libdir"
cc "$src/tests/install/use_stepwatch.c" $(pkg-config --cflags --libs stepwatch) \
   -Wl,-rpath,"$(dirname "$libdir")" -o "$work/use_pkgconfig"
"$work/use_pkgconfig" | grep -q "forward"
passed=$((passed + 1))
# docs/core.md's static line: the archive linked in, no libstepwatch.so needed at run time
# (no rpath here: the program must run without finding the prefix's libraries).
cc "$src/tests/install/use_stepwatch.c" $(pkg-config --cflags --libs stepwatch-static) \
   -o "$work/use_pkgconfig_static"
if readelf -d "$work/use_pkgconfig_static" | grep -q "libstepwatch"; then
    echo "pkg-config stepwatch-static: the program still needs libstepwatch.so" >&2
    exit 1
fi
"$work/use_pkgconfig_static" | grep -q "forward"
passed=$((passed + 1))

seen=""
for c in "$(command -v cmake)" /usr/bin/cmake "$build/../venv/bin/cmake"; do
    [ -x "$c" ] || continue
    version=$("$c" --version | head -n 1)
    case "$seen" in *"|$version|"*) continue ;; esac
    seen="$seen|$version|"
    dir="$work/cmake-$(echo "$version" | tr -c 'A-Za-z0-9.\n' _)"
    "$c" -S "$src/tests/install" -B "$dir" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
    "$c" --build "$dir" >/dev/null
    "$dir/use_stepwatch" | grep -q "forward"
    "$dir/use_stepwatch_static" | grep -q "forward"
    echo "find_package(stepwatch) with $version: ok"
    passed=$((passed + 1))
done

# The .pc for /usr with Debian's multiarch libdir and for /usr/local: pkg-config must give
# the include and library directories the files are in (none at all for system dirs).
pc_for() { # prefix libdir
    cmake -DSW_PC_IN="$src/cmake/stepwatch.pc.in" -DSW_PC_OUT="$work/pc/stepwatch.pc" \
          -DSW_LIBDIR="$2" -DSW_INCLUDEDIR=include -DPROJECT_VERSION=0 \
          -DCMAKE_INSTALL_PREFIX="$1" -P "$src/cmake/stepwatch_pc.cmake"
    PKG_CONFIG_PATH="$work/pc" pkg-config --cflags --libs stepwatch
}
expect() { # got want
    if [ "$1" != "$2" ]; then
        echo "pkg-config gave '$1', expected '$2'" >&2
        exit 1
    fi
    passed=$((passed + 1))
}
mkdir -p "$work/pc"
expect "$(pc_for /usr lib/x86_64-linux-gnu | sed 's/ *$//')" "-lstepwatch"
expect "$(pc_for /usr/local lib | sed 's/ *$//')" "-I/usr/local/include -L/usr/local/lib -lstepwatch"
expect "$(pc_for /opt/sw lib64 | sed 's/ *$//')" "-I/opt/sw/include -L/opt/sw/lib64 -lstepwatch"
echo "$passed passed, 0 failed"
