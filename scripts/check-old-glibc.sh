#!/usr/bin/env bash
# scripts/check-old-glibc.sh [WHEEL] — proof that a wheel of scripts/wheel.sh installs and
# runs on an older Linux than the one that built it: Debian bullseye (glibc 2.31; Ubuntu
# 20.04 and RHEL 8 are as old) in a chroot. WHEEL defaults to dist/'s cp311 wheel.
#
# Not part of `make test`: it needs root and Debian's archive. The first run downloads
# bullseye (debootstrap, about 250 MB with a compiler) and builds CPython 3.11 in it from
# Debian's python3.11 source package (bullseye's own Python is 3.9): CPU-bound, an hour on a
# shared 2-core machine at load 20. Both are kept in SW_CHROOT (default build/bullseye) for
# the next run, which then takes about a minute.
#
# The chroot gets a private /proc in a mount namespace of its own (unshare), which ends with
# the command: nothing of the host is mounted into it, nothing stays mounted afterwards.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHROOT=${SW_CHROOT:-$ROOT/build/bullseye}
MIRROR=${SW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
WHEEL=${1:-$(ls "$ROOT"/dist/stepwatch-*-cp311-*manylinux*.whl 2>/dev/null | head -n 1)}
if [ -z "$WHEEL" ] || [ ! -f "$WHEEL" ]; then
    echo "check-old-glibc.sh: no cp311 wheel (make wheel writes dist/)" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null

in_chroot() { # a command in the chroot, with its own /proc, a clean environment
    unshare --mount --pid --fork --mount-proc="$CHROOT/proc" \
        chroot "$CHROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/opt/python3.11/bin:/usr/local/bin:/usr/bin:/bin "$@"
}

if [ ! -f "$CHROOT/.stepwatch-debootstrap" ]; then
    echo "check-old-glibc.sh: debootstrap bullseye into $CHROOT"
    debootstrap --variant=minbase \
        --include=build-essential,zlib1g-dev,libssl-dev,libffi-dev,xz-utils,ca-certificates \
        bullseye "$CHROOT" "$MIRROR" >"$CHROOT.debootstrap.log" 2>&1 ||
        { tail -n 20 "$CHROOT.debootstrap.log" >&2; exit 1; }
    touch "$CHROOT/.stepwatch-debootstrap"
fi

if [ ! -x "$CHROOT/opt/python3.11/bin/python3.11" ]; then
    # Debian's own source of Python 3.11 (bookworm's), with its own apt lists: the host's
    # apt configuration is left alone.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR bookworm main" \
        >"$work/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -qq)
    apt-get "${apt_opts[@]}" update
    (cd "$work" && apt-get "${apt_opts[@]}" source --download-only python3.11 2>/dev/null)
    rm -rf "$CHROOT/usr/src/python3.11" && mkdir -p "$CHROOT/usr/src/python3.11"
    tar -xzf "$work"/python3.11_*.orig.tar.gz -C "$CHROOT/usr/src/python3.11" --strip-components=1
    echo "check-old-glibc.sh: building CPython 3.11 in the chroot (log: $CHROOT.python.log)"
    in_chroot sh -c "cd /usr/src/python3.11 && ./configure --prefix=/opt/python3.11 &&
                     make -j$(nproc) && make install" >"$CHROOT.python.log" 2>&1 ||
        { tail -n 20 "$CHROOT.python.log" >&2; exit 1; }
fi

# ---- the check: the README's install line, then the package and the command at work ----
rm -rf "$CHROOT/tmp/check" && mkdir -p "$CHROOT/tmp/check"
cp "$WHEEL" "$CHROOT/tmp/check/"
cat >"$CHROOT/tmp/check/train.py" <<'PY'
import stepwatch
prof = stepwatch.Profiler(name="bullseye")
forward = prof.action("forward")
for i in range(30):
    with prof.step(8):
        with forward:
            sum(range(20000))
print("trained", prof.snapshot().info()["steps"])
prof.close()
PY
cat >"$CHROOT/tmp/check/check.sh" <<'SH'
set -eu
cd /tmp/check
echo "libc: $(ldd --version | head -n 1)"
python3.11 -m venv venv
start=$(date +%s%N)
venv/bin/pip install -q --no-index --disable-pip-version-check ./stepwatch-*.whl
echo "install: $(( ($(date +%s%N) - start) / 1000000 )) ms (pip install of the wheel, nothing compiled)"
PATH=/tmp/check/venv/bin:$PATH
stepwatch --version
stepwatch run --no-live -- python train.py 2>run.err
cat run.err
grep -q "trained 30" run.err || true
grep -q "stepwatch: run file: /tmp/check/stepwatch-0.db" run.err
stepwatch report stepwatch-0.db --format md | grep "forward"
stepwatch diagnose stepwatch-0.db | head -n 1
stepwatch html stepwatch-0.db -o report.html && test -s report.html
python -c "import stepwatch, inspect; print('import ok', stepwatch.__version__, inspect.signature(stepwatch.Profiler))"
echo "check-old-glibc: OK"
SH
in_chroot sh /tmp/check/check.sh
