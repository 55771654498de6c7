#!/usr/bin/env bash
# bench/traceml/compare.sh [ROUNDS] — stepwatch beside TraceML (traceml-ai on PyPI) on one
# public script run unmodified: Hugging Face's examples/pytorch/language-modeling/run_clm.py
# (the Trainer), taken from HF_EXAMPLES (default /work/peers/transformers-examples, see its
# SOURCE; not in this repository), training a tiny GPT-2 made here (bench/traceml/prepare.py:
# nothing downloaded, HF_HUB_OFFLINE=1) for one epoch on the CPU.
#
# Each round runs, one after the other so the machine's load falls on all alike:
#   bare           python run_clm.py ARGS                      (stepwatch's venv)
#   stepwatch      stepwatch run --device-stats --modules -- python run_clm.py ARGS
#   bare-tm        python run_clm.py ARGS                      (TraceML's venv)
#   bare-torchrun  python -m torch.distributed.run --standalone --nproc_per_node=1 run_clm.py
#                  (TraceML's venv): how `traceml run` launches the script, without TraceML;
#                  under torchrun the Trainer initializes torch.distributed (world of 1)
#   traceml        traceml run run_clm.py --args ARGS          (its default summary mode)
# each under /usr/bin/time (wall, CPU time of the process tree, the largest process's RSS).
# Then, once:
#   joint          both tools on the same steps of one process: `traceml run
#                  bench/traceml/both.py --args run_clm.py ARGS` with stepwatch's package on
#                  PYTHONPATH (the breakdowns compared step by step; JOINT=0 skips it)
#   instructions   bare, stepwatch, bare-torchrun and traceml under valgrind's callgrind
#                  (--instr-atstart=no --separate-threads=yes --trace-children=yes, TraceML's
#                  aggregator process skipped): bench/traceml/cg/sitecustomize.py counts the
#                  instructions of optimizer steps CG_FIRST..CG_FIRST+CG_STEPS (20..40) in the
#                  training process (INSTR=0 skips it; ~5 min a run at this machine's load)
# and prints the summary (bench/traceml/summary.py): per tool, the step breakdown, the top
# modules, peak memory, and the overhead (wall and CPU-time ratios, median and range over the
# rounds; instructions per step). Not part of `make test` or `make bench`.
#
# Needs: build/release (make build: the stepwatch command, bench/libsw_callgrind_marks.so),
# a venv with stepwatch (SW_VENV, default build/venv) and one with traceml-ai, kept apart
# (TRACEML_VENV, default /work/peers/traceml/venv), both with torch 2.13 and transformers:
#   python3 -m venv /work/peers/traceml/venv
#   /work/peers/traceml/venv/bin/pip install -c build/venv/stepwatch-constraints.txt \
#       traceml-ai==0.5.0 transformers==5.24.0 datasets==5.2.0 evaluate==0.4.6 accelerate==1.15.0
# and valgrind for the instruction counts.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${1:-3}
SW_VENV=${SW_VENV:-$ROOT/build/venv}
TRACEML_VENV=${TRACEML_VENV:-/work/peers/traceml/venv}
SW_CMD=${SW_CMD:-$ROOT/build/release/stepwatch}
MARKS=${MARKS:-$ROOT/build/release/bench/libsw_callgrind_marks.so}
HF_EXAMPLES=${HF_EXAMPLES:-/work/peers/transformers-examples}
SCRIPT=$HF_EXAMPLES/language-modeling/run_clm.py
OUT=${OUT:-$ROOT/build/bench/traceml}
CG_FIRST=${CG_FIRST:-20}
CG_STEPS=${CG_STEPS:-20}
for need in "$SW_VENV/bin/python" "$TRACEML_VENV/bin/traceml" "$SW_CMD" "$SCRIPT"; do
    [ -e "$need" ] || { echo "compare.sh: $need missing (see the header)" >&2; exit 1; }
done

if [ -z "${SUMMARY_ONLY:-}" ]; then  # SUMMARY_ONLY=1: the summary of the runs already in $OUT
rm -rf "$OUT" && mkdir -p "$OUT"
"$SW_VENV/bin/python" "$ROOT/bench/traceml/prepare.py" "$OUT/data"
ARGS=(--config_name "$OUT/data/tiny" --tokenizer_name "$OUT/data/tiny"
      --train_file "$OUT/data/train.txt" --do_train --per_device_train_batch_size 4
      --num_train_epochs 1 --block_size 32 --output_dir out --report_to none --use_cpu
      --save_strategy no --logging_steps 10 --seed 0)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
# stepwatch's package alone, for the joint pass in TraceML's venv (same Python, 3.11)
mkdir -p "$OUT/swpath" && ln -s "$("$SW_VENV/bin/python" -c \
    'import os, stepwatch; print(os.path.dirname(stepwatch.__file__))')" "$OUT/swpath/stepwatch"

# command TOOL DIR: the command line of TOOL, run in DIR
command_of() {
    local tool=$1 dir=$2
    case $tool in
    bare) echo "$SW_VENV/bin/python" "$SCRIPT" ;;
    stepwatch) echo "$SW_CMD" run --device-stats --modules --run-file "$dir/run.db" \
        -o "$dir/report.txt" -- "$SW_VENV/bin/python" "$SCRIPT" ;;
    bare-tm) echo "$TRACEML_VENV/bin/python" "$SCRIPT" ;;
    bare-torchrun) echo "$TRACEML_VENV/bin/python" -m torch.distributed.run --standalone \
        --nproc_per_node=1 "$SCRIPT" ;;
    traceml) echo "$TRACEML_VENV/bin/traceml" run "$SCRIPT" --logs-dir "$dir/logs" \
        --run-name r --args ;;
    esac
}

# run TOOL DIR [PREFIX...]: TOOL's command with ARGS in DIR (its own HF cache: every run
# tokenizes the data alike), output in DIR/log.
run() {
    local tool=$1 dir=$2
    shift 2
    mkdir -p "$dir"
    # shellcheck disable=SC2046  # the paths hold no spaces (checked below)
    (cd "$dir" && HF_HOME="$dir/hf" "$@" $(command_of "$tool" "$dir") "${ARGS[@]}" >log 2>&1) ||
        { echo "compare.sh: $tool failed, see $dir/log" >&2; exit 1; }
}
case "$OUT$SW_VENV$TRACEML_VENV$SCRIPT" in *" "*) echo "compare.sh: paths with spaces" >&2
    exit 1 ;; esac

for round in $(seq 1 "$ROUNDS"); do
    for tool in bare stepwatch bare-tm bare-torchrun traceml; do
        run "$tool" "$OUT/$tool-$round" /usr/bin/time -f "%e %U %S %M" -o "$OUT/$tool-$round/time"
        echo "round $round $tool: $(cat "$OUT/$tool-$round/time")" >&2
    done
done

if [ "${JOINT:-1}" != 0 ]; then
    mkdir -p "$OUT/joint"
    (cd "$OUT/joint" && HF_HOME="$OUT/joint/hf" PYTHONPATH="$OUT/swpath" \
        STEPWATCH_RUN_FILE="$OUT/joint/run.db" "$TRACEML_VENV/bin/traceml" run \
        "$ROOT/bench/traceml/both.py" --logs-dir "$OUT/joint/logs" --run-name r \
        --args "$SCRIPT" "${ARGS[@]}" >log 2>&1)
    echo "joint: done" >&2
fi

if [ "${INSTR:-1}" != 0 ] && command -v valgrind >/dev/null && [ -e "$MARKS" ]; then
    for tool in bare stepwatch bare-torchrun traceml; do
        dir=$OUT/cg-$tool
        mkdir -p "$dir/dumps"
        run "$tool" "$dir" env PYTHONPATH="$ROOT/bench/traceml/cg" \
            STEPWATCH_CG_WINDOW="$CG_FIRST:$CG_STEPS" STEPWATCH_CG_MARKS="$MARKS" \
            valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes \
            --trace-children=yes --trace-children-skip-by-arg='*aggregator_main*' --quiet \
            --callgrind-out-file="$dir/dumps/cg.%p"
        echo "instructions $tool: done" >&2
    done
fi
fi

"$SW_VENV/bin/python" "$ROOT/bench/traceml/summary.py" "$OUT" "$ROUNDS"
