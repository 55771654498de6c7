#!/usr/bin/env bash
# bench/traceml/compare.sh [ROUNDS] — stepwatch beside TraceML (traceml-ai on PyPI) on one
# public script (bench/traceml/train.py, run unmodified): each round runs it bare (in each
# tool's venv: they hold different packages), under `stepwatch run --device-stats` and under
# `traceml run` (its default summary mode), one after the other, so the machine's load falls on all three alike. Prints, per tool, the median
# and spread (min..max) of the command's wall time and of its CPU time (user+sys of the
# whole process tree), the largest process's peak RSS, and each tool's own step breakdown
# (mean per training step) from its last round, and stepwatch's modules table from one more,
# untimed pass (bench/traceml/modules_pass.py: `stepwatch run` has no --modules yet). Not
# part of `make test` or `make bench`.
#
# Needs: a venv with stepwatch (SW_VENV, default build/venv) and one with traceml-ai, kept
# apart (TRACEML_VENV, default /work/peers/traceml/venv), both with torch 2.13 and Lightning:
#   python3 -m venv /work/peers/traceml/venv
#   /work/peers/traceml/venv/bin/pip install -c build/venv/stepwatch-constraints.txt \
#       traceml-ai==0.5.0 lightning==2.6.6
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${1:-3}
SW_VENV=${SW_VENV:-$ROOT/build/venv}
TRACEML_VENV=${TRACEML_VENV:-/work/peers/traceml/venv}
SW_CMD=${SW_CMD:-$ROOT/build/release/stepwatch}
SCRIPT=$ROOT/bench/traceml/train.py
OUT=${OUT:-$ROOT/build/bench/traceml}
for need in "$SW_VENV/bin/python" "$TRACEML_VENV/bin/traceml" "$SW_CMD"; do
    [ -x "$need" ] || { echo "compare.sh: $need missing (see the header)" >&2; exit 1; }
done
# SUMMARY_ONLY=1: print the summary of the runs already in $OUT
if [ -z "${SUMMARY_ONLY:-}" ]; then
rm -rf "$OUT" && mkdir -p "$OUT"

# run TOOL ROUND: the script under TOOL in its own directory; /usr/bin/time writes the wall
# time, CPU time and the largest process's peak RSS.
run() {
    local tool=$1 round=$2 dir=$OUT/$1-$2
    mkdir -p "$dir" && cd "$dir"
    local timing=(/usr/bin/time -f "%e %U %S %M" -o "$dir/time")
    case $tool in
    bare) PATH=$SW_VENV/bin:$PATH "${timing[@]}" python "$SCRIPT" >out 2>&1 ;;
    bare-tm) "${timing[@]}" "$TRACEML_VENV/bin/python" "$SCRIPT" >out 2>&1 ;;
    stepwatch) PATH=$SW_VENV/bin:$PATH "${timing[@]}" "$SW_CMD" run --device-stats \
        --run-file "$dir/run.db" -o "$dir/report.txt" -- python "$SCRIPT" >out 2>&1 ;;
    traceml) "${timing[@]}" "$TRACEML_VENV/bin/traceml" run "$SCRIPT" --run-name "r$round" \
        --logs-dir "$dir/logs" >out 2>&1 ;;
    esac
    cd "$ROOT"
}

for round in $(seq 1 "$ROUNDS"); do
    for tool in bare stepwatch bare-tm traceml; do
        run "$tool" "$round"
        echo "round $round $tool: $(cat "$OUT/$tool-$round/time")" >&2
    done
done

mkdir -p "$OUT/modules" && (cd "$OUT/modules" && "$SW_VENV/bin/python" \
    "$ROOT/bench/traceml/modules_pass.py" "$SCRIPT" "$OUT/modules/run.db" >out 2>&1)
fi

"$SW_VENV/bin/python" - "$OUT" "$ROUNDS" <<'EOF'
import glob, json, os, sqlite3, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def times(tool):
    rows = [open(f"{out}/{tool}-{r}/time").read().split() for r in range(1, rounds + 1)]
    wall = [float(r[0]) for r in rows]
    cpu = [float(r[1]) + float(r[2]) for r in rows]
    rss = [int(r[3]) / 1024 for r in rows]
    return wall, cpu, rss

def spread(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}..{max(xs):.1f})"

bases = {"bare": times("bare"), "stepwatch": times("bare"), "bare-tm": times("bare-tm"),
         "traceml": times("bare-tm")}
print(f"## {rounds} rounds, one after the other; medians (min..max)\n")
print("| | wall s | vs bare (its venv) | CPU s (user+sys) | vs bare | peak RSS MiB |")
print("|---|---|---|---|---|---|")
for tool in ("bare", "stepwatch", "bare-tm", "traceml"):
    wall, cpu, rss = times(tool)
    base = bases[tool]
    ratio = [w / b for w, b in zip(wall, base[0])]
    cratio = [c / b for c, b in zip(cpu, base[1])]
    print(f"| {tool} | {spread(wall)} | x{statistics.median(ratio):.2f} "
          f"({min(ratio):.2f}..{max(ratio):.2f}) | {spread(cpu)} | "
          f"x{statistics.median(cratio):.2f} | {spread(rss)} |")

import stepwatch
steps = [s for s in stepwatch.load_steps(f"{out}/stepwatch-{rounds}/run.db")
         if s["phase"] == "train"]
print(f"\n## stepwatch, last round: mean per train step over {len(steps)} steps (ms)\n")
for k in ("duration", "data", "forward", "loss", "backward", "optimizer", "zero_grad",
          "callback", "other"):
    print(f"- {k}: {statistics.mean(s[k + '_ns'] for s in steps) / 1e6:.3f}")
copies = [r for r in stepwatch.load(f"{out}/stepwatch-{rounds}/run.db").records("train")
          if r["action"] == "h2d_copy"]
if copies:
    print(f"- h2d_copy (in data): {copies[0]['mean_ns'] / 1e6:.3f}")
db = sqlite3.connect(f"{out}/stepwatch-{rounds}/run.db")
rss = db.execute("SELECT max(mem_rss_max) FROM ranks").fetchone()[0]
print(f"- peak RSS (per-step samples): {rss / 2**20:.0f} MiB" if rss else "- no RSS recorded")
print("\n## stepwatch's modules table (untimed pass, every step sampled)\n")
text = open(f"{out}/modules/out").read()
print(text[text.find("Modules ("):] if "Modules (" in text else "(no modules table)")
print("## TraceML, last round\n")
summary = glob.glob(f"{out}/traceml-{rounds}/logs/*/final_summary.json")
if summary:
    ev = json.load(open(summary[0]))["primary_diagnosis"]["evidence"]
    print(json.dumps(ev, indent=1))
    print(open(summary[0].replace(".json", ".txt")).read())
else:
    print("(no final_summary.json)")
EOF
