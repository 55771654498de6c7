"""The HTML report's size and open time for runs of 10^3 and 10^6 steps (issue 30's bounds:
under 2 MB and under a second for 10^6 steps), measured in real headless Chromium.

Each run is recorded through the Python API (train and validation phases alternating every
1000 steps, two actions per step), written with stepwatch.html, then opened by Chromium
`--repeat` times: a script added after the report's own records performance.now() once the
report has drawn (navigation start -> parsed HTML, parsed JSON, every chart and table
drawn). Prints a table; writes the figures as JSON (--out).

    build/venv/bin/python bench/bench_html.py [--quick] [--shots DIR]
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import stepwatch

PROBE = r"""
<script>
(function () {
  var drawn = performance.now();
  window.addEventListener("load", function () {
    var pre = document.createElement("pre");
    pre.id = "sw-probe";
    pre.textContent = JSON.stringify({ drawn_ms: drawn, load_ms: performance.now(),
      rendered: document.body.getAttribute("data-rendered"),
      error: document.getElementById("sw-error").textContent,
      svg_elements: document.querySelectorAll("svg *").length,
      response_end_ms: performance.getEntriesByType("navigation")[0].responseEnd });
    document.body.appendChild(pre);
  });
})();
</script>
"""


def record(path, steps):
    p = stepwatch.Profiler(name=f"bench-{steps}", run_file=str(path), warmup_steps=5, live=False)
    data, fwd = p.action("data"), p.action("forward")
    done = 0
    while done < steps:
        phase = "train" if (done // 1000) % 5 else "valid"
        with p.phase(phase):
            for _ in range(min(1000, steps - done)):
                with p.step(32):
                    with data:
                        pass
                    with fwd:
                        pass
                done += 1
    p.close()


def chromium_cpu(chromium, page, width=1400):
    """Chromium opening page with --dump-dom: (its stdout, the CPU seconds of its processes,
    user + system, and the wall seconds)."""
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},3000", "--dump-dom", page.as_uri()]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return proc, cpu, wall


def open_in_chromium(chromium, page, blank):
    """The report page opened, then a blank page opened the same way: the page's own CPU
    cost is the difference (on a shared machine wall time mostly measures the others)."""
    proc, cpu, wall = chromium_cpu(chromium, page)
    _, blank_cpu, _ = chromium_cpu(chromium, blank)
    found = re.search(r'<pre id="sw-probe">(.*?)</pre>', proc.stdout, re.S)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"chromium failed on {page}: {proc.stderr[-2000:]}")
    probe = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    if probe["rendered"] != "1" or probe["error"]:
        raise SystemExit(f"the report did not draw: {probe}")
    probe["chromium_wall_s"] = wall
    probe["cpu_ms_over_blank"] = (cpu - blank_cpu) * 1e3
    probe["script_ms"] = float(re.search(r'data-draw-ms="(\d+)"', proc.stdout).group(1))
    return probe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("SW_BENCH_DIR", "build/bench"),
                                                  "html.json"))
    ap.add_argument("--quick", action="store_true", help="10^3 and 10^5 steps, one opening")
    ap.add_argument("--shots", help="also save a 1400 px screenshot of each page here")
    args = ap.parse_args()
    shots = args.shots
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("bench_html needs chromium (apt-get install chromium)")
    sizes = [1000, 100000] if args.quick else [1000, 1000000]
    repeat = 1 if args.quick else 5
    results = {}
    with tempfile.TemporaryDirectory() as d:
        blank = Path(d) / "blank.html"
        blank.write_text("<!DOCTYPE html><title>blank</title><p>blank</p>")
        for steps in sizes:
            run = os.path.join(d, f"run{steps}.db")
            t = time.perf_counter()
            record(run, steps)
            record_s = time.perf_counter() - t
            html = os.path.join(d, f"run{steps}.html")
            t = time.perf_counter()
            stepwatch.html(run, html)
            write_s = time.perf_counter() - t
            page = os.path.join(d, f"probe{steps}.html")
            with open(html, encoding="utf-8") as f:
                text = f.read()
            with open(page, "w", encoding="utf-8") as f:
                f.write(text.replace("</body>", PROBE + "</body>"))
            probes = [open_in_chromium(chromium, Path(page), blank) for _ in range(repeat)]
            drawn = [p["drawn_ms"] for p in probes]
            results[steps] = {
                "steps": steps, "bytes": os.path.getsize(html), "record_s": record_s,
                "write_s": write_s, "drawn_ms": drawn, "drawn_ms_median": statistics.median(drawn),
                "load_ms_median": statistics.median(p["load_ms"] for p in probes),
                "chromium_wall_s_median": statistics.median(p["chromium_wall_s"] for p in probes),
                "script_ms_median": statistics.median(p["script_ms"] for p in probes),
                "cpu_ms_over_blank": [p["cpu_ms_over_blank"] for p in probes],
                "cpu_ms_over_blank_median": statistics.median(p["cpu_ms_over_blank"] for p in probes),
                "script_ms": [p["script_ms"] for p in probes],
                "response_end_ms_median": statistics.median(p["response_end_ms"] for p in probes),
                "svg_elements": probes[0]["svg_elements"]}
            if shots:
                os.makedirs(shots, exist_ok=True)
                shot = os.path.abspath(os.path.join(shots, f"html_{steps}_1400.png"))
                subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                "--hide-scrollbars", "--window-size=1400,3000",
                                f"--screenshot={shot}", Path(html).as_uri()],
                               capture_output=True, timeout=300, check=True)
    print(f"medians of {repeat} openings (ranges after them); drawn: navigation start to every "
          f"chart drawn (wall), of which script: parsing the data and drawing (wall); CPU: "
          f"Chromium's CPU time for the page minus for a blank page")
    print(f"{'steps':>9} {'page':>9} {'write':>8} {'drawn':>20} {'script':>18} {'CPU':>18}")

    def col(r, key):
        v = r[key]
        return f"{statistics.median(v):>5.0f} ms {min(v):>4.0f}-{max(v):<5.0f}"
    for r in results.values():
        print(f"{r['steps']:>9} {r['bytes'] / 1024:>6.0f} kB {r['write_s']:>6.2f} s "
              f"{col(r, 'drawn_ms'):>20} {col(r, 'script_ms'):>18} {col(r, 'cpu_ms_over_blank'):>18}")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"loadavg": os.getloadavg(), "cpus": os.cpu_count(), "chromium": subprocess.run([chromium, "--version"], capture_output=True,
                                              text=True).stdout.strip(),
                   "runs": list(results.values())}, f, indent=1)
    print(f"figures: {args.out}")


if __name__ == "__main__":
    main()
