#!/bin/sh
# check_header.sh SOURCE_DIR WORK_DIR — the public header under a user's strict flags: C11
# and C99 with -pedantic -Wall -Wextra -Werror, C++11 and C++17 the same, with gcc and (when
# installed) clang; each also with -DSW_DISABLE. Compiled only: linking is the install test's.
set -eu
src=$1 work=$2
mkdir -p "$work"
file="$src/tests/header/use_header.c"
warn="-pedantic -Wall -Wextra -Werror"
passed=0 failed=0
check() { # compiler language standard [extra flags]
    cc=$1 lang=$2 std=$3
    shift 3
    command -v "$cc" >/dev/null 2>&1 || return 0
    if "$cc" -x "$lang" "-std=$std" $warn "$@" -I"$src/include" -c "$file" -o "$work/out.o"; then
        passed=$((passed + 1))
    else
        echo "FAILED: $cc -x $lang -std=$std $warn $*" >&2
        failed=$((failed + 1))
    fi
}
for flags in "" "-DSW_DISABLE"; do
    for c in gcc clang; do
        check "$c" c c11 $flags
        check "$c" c c99 $flags
    done
    for cxx in g++ clang++; do
        check "$cxx" c++ c++11 $flags
        check "$cxx" c++ c++17 $flags
    done
done
command -v g++ >/dev/null 2>&1 || { echo "no g++: the C++ check did not run" >&2; failed=$((failed + 1)); }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
