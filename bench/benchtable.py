"""What the Python benchmarks share: their table on stdout and their figures as JSON."""
import json
import os


def write(title, rows, figures, out, width=44, value_width=20):
    """Print rows (name, measured, budget, ok: True/False/None) under title, then write
    figures to out (JSON) and say where."""
    print(f"{title:{width}} {'measured':>{value_width}} {'budget':>10}  ok")
    for name, value, budget, ok in rows:
        mark = "" if ok is None else ("yes" if ok else "NO")
        print(f"{name:{width}} {value:>{value_width}} {budget:>10}  {mark}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(figures, f, indent=2)
    print(f"figures: {out}")
