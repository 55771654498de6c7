#!/bin/sh
# check_install.sh BUILD_DIR SOURCE_DIR WORK_DIR — install stepwatch into a fresh prefix, then
# build a user's program against it twice: with pkg-config and with find_package(stepwatch).
set -eu
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(ls -d "$work"/prefix/lib*/pkgconfig | head -n 1)
export PKG_CONFIG_PATH="$libdir"
cc "$src/tests/install/use_stepwatch.c" $(pkg-config --cflags --libs stepwatch) \
   -Wl,-rpath,"$(dirname "$libdir")" -o "$work/use_pkgconfig"
"$work/use_pkgconfig" | grep -q "forward"
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
"$work/cmake/use_stepwatch" | grep -q "forward"
echo "1 passed, 0 failed"
