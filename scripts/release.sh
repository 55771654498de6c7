#!/usr/bin/env bash
# scripts/release.sh [DIST] — exactly what would be uploaded to PyPI, made and checked; nothing
# is uploaded. DIST defaults to dist/.
#   1. scripts/wheel.sh DIST: the sdist and one manylinux2014 wheel per CPython (3.11-3.13)
#   2. twine check: the metadata, and the long description (python/README.md, written for
#      users) renders on PyPI
#   3. every wheel: only the package (no C source, no header), py.typed and the stubs in it,
#      the description is python/README.md; then installed in a fresh venv of its own Python,
#      nothing compiled, timed, and run: import, a profiled loop with its run file, the
#      `stepwatch` command (`run`, `report`, `diagnose`)
# Then it prints the upload command. scripts/check-old-glibc.sh runs a wheel on an older
# Debian (glibc 2.31). SW_RELEASE_BUILD=0 checks what DIST holds without building it again.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIST=$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)
TOOLS=${SW_WHEEL_TOOLS:-$ROOT/build/wheel-tools}

if [ "${SW_RELEASE_BUILD:-1}" != 0 ]; then
    "$ROOT/scripts/wheel.sh" "$DIST"
fi
"$TOOLS/bin/twine" check --strict "$DIST"/stepwatch-*.tar.gz "$DIST"/stepwatch-*.whl

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/smoke.py" <<'PY'
import inspect, os, sys
import stepwatch
prof = stepwatch.Profiler(name="smoke", run_file=sys.argv[1])
forward = prof.action("forward")
for i in range(20):
    with prof.step(4):
        with forward:
            sum(range(1000))
assert prof.snapshot().info()["steps"] == 20
prof.close()
assert stepwatch.load(sys.argv[1]).info()["steps"] == 20
assert "batch_size" in str(inspect.signature(stepwatch.Profiler.step))
print("smoke: ok", stepwatch.__version__)
PY
for wheel in "$DIST"/stepwatch-*.whl; do
    name=$(basename "$wheel")
    # What the wheel holds: the package, its stubs, the command; no C source or header.
    "$TOOLS/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
bad = [n for n in names if n.endswith((".c", ".h"))]
assert not bad, f"C files in the wheel: {bad}"
for needed in ("stepwatch/py.typed", "stepwatch/__init__.py", "stepwatch/_stepwatch.pyi",
               "stepwatch/torch.pyi", "stepwatch/lightning.pyi", "stepwatch/ignite.pyi",
               "stepwatch/fastai.pyi", "stepwatch/distributed.pyi"):
    assert needed in names, f"{needed} is not in the wheel"
assert any(n.endswith(".data/scripts/stepwatch") for n in names), "no stepwatch command"
meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
text = zipfile.ZipFile(sys.argv[1]).read(meta).decode()
assert "Description-Content-Type: text/markdown" in text
assert "## Zero code changes" in text and "scripts/venv.sh" not in text, \
    "the long description is not python/README.md"
PY
    tag=$(echo "$name" | sed -n 's/^stepwatch-[^-]*-\(cp3[0-9]*\)-.*/\1/p')
    version="${tag:2:1}.${tag:3}"
    py=$(command -v "python$version" 2>/dev/null || true)
    if [ -z "$py" ] || ! "$py" -c 1 2>/dev/null; then
        py=$(ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version" 2>/dev/null | head -n 1)
    fi
    if [ -z "$py" ]; then
        echo "release.sh: no Python $version to install $name with" >&2
        exit 1
    fi
    venv="$work/venv-$tag"
    "$py" -m venv "$venv"
    start=$(date +%s%N)
    "$venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$wheel"
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    (cd "$work" && "$venv/bin/python" smoke.py "$work/smoke-$tag.db" >/dev/null)
    (cd "$work" && PATH="$venv/bin:$PATH" "$venv/bin/stepwatch" run --no-live \
        --run-file "$work/run-$tag.db" -- python -c "import stepwatch" 2>"$work/run.err")
    grep -q "stepwatch: run file: $work/run-$tag.db" "$work/run.err"
    "$venv/bin/stepwatch" report "$work/smoke-$tag.db" --format md | grep -q forward
    "$venv/bin/stepwatch" diagnose "$work/smoke-$tag.db" >/dev/null
    echo "release.sh: $name: $(du -k "$wheel" | cut -f1) KiB, installed in a fresh venv in $ms ms, runs"
done
echo "release.sh: checked; to upload: $TOOLS/bin/twine upload $DIST/stepwatch-*"
