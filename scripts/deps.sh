#!/usr/bin/env bash
# scripts/deps.sh demo|test|wheel — make sure the Debian packages that `make demo` or `make test`
# needs are there. What is missing is installed with apt-get when this runs as root (or with
# a sudo that asks no password); otherwise the script names the apt-get line and stops.
#   demo: a C compiler, CMake, SQLite's header and library (the demo needs nothing else)
#   test: the demo's, plus cmocka, pkg-config, a C++ compiler (the header's C++ check), the
#         Python venv and headers, sqlite3, Chromium (the HTML report is drawn in it) and
#         clang with its libFuzzer runtime (the fuzz targets), Open MPI (the mpirun tests of
#         libstepwatch_mpi), clang-format (scripts/format.sh), valgrind (make bench counts
#         instructions with callgrind), libmicrohttpd (the live report's server, stepwatch
#         serve; the command builds without it and then says so)
#   wheel: the Python venv (the build tools' venv: zig's C compiler, CMake, auditwheel come
#         from PyPI), tclsh and dpkg-source (SQLite's amalgamation from Debian's source)
# .ci/run installs the same list up front.
set -euo pipefail
what=${1:?usage: scripts/deps.sh demo|test|wheel}

have_cmd() { command -v "$1" >/dev/null 2>&1; }
# Does the C compiler find this header? (A package is there when its header is.)
have_header() { have_cmd cc && printf '#include <%s>\n' "$1" | cc -E -x c - >/dev/null 2>&1; }
have_python_venv() { have_cmd python3 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }
have_python_dev() {
    have_cmd python3 &&
        [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h" ]
}

have_fuzzer_runtime() {
    compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null
}

missing=()
need() { # need PACKAGE CHECK...
    local pkg=$1
    shift
    "$@" || missing+=("$pkg")
}
if [ "$what" = wheel ]; then
    need python3-venv have_python_venv
    need tcl have_cmd tclsh
    need dpkg-dev have_cmd dpkg-source
else
    need build-essential have_cmd cc
    need cmake have_cmd cmake
    need libsqlite3-dev have_header sqlite3.h
fi
if [ "$what" = test ]; then
    need g++ have_cmd g++
    need pkg-config have_cmd pkg-config
    need libcmocka-dev have_header cmocka.h
    need sqlite3 have_cmd sqlite3
    need python3-venv have_python_venv
    need python3-dev have_python_dev
    need chromium have_cmd chromium
    need eslint have_cmd eslint                    # lints the HTML report's script
    need clang have_cmd clang                      # the fuzzers (libFuzzer)
    need libclang-rt-dev have_fuzzer_runtime
    need openmpi-bin have_cmd mpirun               # the many-ranks tests (mpirun -np 2..4)
    need libopenmpi-dev test -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
    need clang-format have_cmd clang-format        # scripts/format.sh (.clang-format)
    need valgrind have_header valgrind/callgrind.h # make bench's instruction counts
    need libmicrohttpd-dev have_header microhttpd.h # stepwatch serve's HTTP server
fi
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" != 0 ]; then
    if have_cmd sudo && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        echo "make $what needs these Debian packages: ${missing[*]}" >&2
        echo "install them with: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi
if ! have_cmd apt-get; then
    echo "make $what needs: ${missing[*]} (named as Debian packages; no apt-get here)" >&2
    exit 1
fi
echo "deps.sh: installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
