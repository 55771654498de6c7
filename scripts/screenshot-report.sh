#!/usr/bin/env bash
# scripts/screenshot-report.sh [BUILD_ROOT] [OUT.png] — the README's picture (docs/report.png):
# the demo's real C MLP (examples/train_mlp, what `make demo` runs) trained with a run file,
# its HTML report written by `stepwatch html`, and the top of that page drawn by headless
# Chromium. Needs `make build` and chromium (apt-get install chromium).
set -euo pipefail
root="${1:-build}"
png="${2:-docs/report.png}"
bin="$root/release/examples/train_mlp"
cli="$root/release/stepwatch"
for need in "$bin" "$cli"; do
    if [ ! -x "$need" ]; then
        echo "screenshot-report: $need is not built (run 'make build' first)" >&2
        exit 1
    fi
done
chromium=$(command -v chromium || true)
if [ -z "$chromium" ]; then
    echo "screenshot-report: chromium is not installed (apt-get install chromium)" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# a short run with the demo's settings: 3 epochs, 2 ms of simulated data loading per batch
bin=$(realpath "$bin"); cli=$(realpath "$cli")
(cd "$work" && "$bin" --epochs 3 --delay-ms 2 --run-file train_mlp.db --timeline --quiet)
"$cli" html "$work/train_mlp.db" -o "$work/report.html"
mkdir -p "$(dirname "$png")"
# --screenshot draws the window's size from the top of the page: the summary, the step time
# series and where each step's time goes
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1140 \
    --screenshot="$(realpath -m "$png")" "file://$work/report.html" >/dev/null 2>&1
if [ ! -s "$png" ]; then
    echo "screenshot-report: chromium wrote no $png" >&2
    exit 1
fi
echo "screenshot-report: $png"
