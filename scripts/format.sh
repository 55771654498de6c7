#!/usr/bin/env bash
# scripts/format.sh [--check] — clang-format (.clang-format at the root) over the C sources:
# src/, cli/, include/, the Python extension (python/), tests/ (C and fuzz), bench/ and
# examples/ — every C file git tracks there.
#   without --check  reformat them in place
#   --check          change nothing; list the files that differ and exit 1 if any does
# Exit 77 (the ctest "skipped" code) when clang-format is not installed (Debian:
# clang-format). CLANG_FORMAT picks another binary.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
check=0
case "${1:-}" in
"") ;;
--check) check=1 ;;
*)
    echo "usage: scripts/format.sh [--check]" >&2
    exit 2
    ;;
esac
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
    echo "format.sh: SKIPPED: no $CLANG_FORMAT (Debian: apt-get install clang-format)" >&2
    exit 77
fi
cd "$ROOT" || exit 1
mapfile -t files < <(git ls-files -- 'src/*.[ch]' 'cli/*.[ch]' 'include/*.h' 'python/*.[ch]' \
    'tests/*.[ch]' 'bench/*.[ch]' 'examples/*.[ch]')
if [ ${#files[@]} -eq 0 ]; then
    echo "format.sh: no C files found (not a git checkout?)" >&2
    exit 1
fi
if [ "$check" = 0 ]; then
    "$CLANG_FORMAT" -i --style=file "${files[@]}"
    exit $?
fi
# One clang-format for every file: it names each line that differs ("FILE:L:C: error: code
# should be clang-formatted"); the files are what is listed. Any other failure is reported
# as it is (a bad .clang-format must not pass for "all formatted").
out=$("$CLANG_FORMAT" --style=file --dry-run --Werror "${files[@]}" 2>&1)
status=$?
mapfile -t differ < <(printf '%s\n' "$out" |
    sed -nE 's/^(.+):[0-9]+:[0-9]+: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$status" != 0 ] && [ ${#differ[@]} -eq 0 ]; then
    printf '%s\n' "$out" >&2
    echo "format.sh: $CLANG_FORMAT failed (exit $status)" >&2
    exit 1
fi
if [ ${#differ[@]} -gt 0 ]; then
    printf '%s\n' "${differ[@]}"
    echo "format.sh: ${#differ[@]} of ${#files[@]} files differ from .clang-format" \
        "(scripts/format.sh fixes them)" >&2
    exit 1
fi
echo "format.sh: ${#files[@]} files formatted as .clang-format says"
