"""stepwatch.goodput — how much of a run's wall time was steady training.

    parts = stepwatch.goodput.parts(prof.snapshot())   # or a loaded run file's Snapshot
    stepwatch.goodput.note(prof)                        # the figures into the run's notes

Goodput is the share of the wall time spent in steady training steps (the training steps after
warm-up, less their data wait and compilation). The rest is listed by cause, and the causes
and goodput add up to the wall time exactly:

  start-up      before the first step (stepwatch.torch's "startup": imports, model set-up)
  compilation   torch.compile's compilations ("compile"), in any step
  data wait     the training steps' wait for their batches ("data")
  warm-up       the warm-up steps' own work (the first steps, kept out of the statistics)
  evaluation    the validation phases ("valid")
  checkpoints   the saves: the adapters' "checkpoint" (torch.save, Lightning's save_checkpoint,
                the Trainer's _save_checkpoint; those inside steps leave the steps' time),
                else actions named for checkpoints or saving
  idle          in the training phase but between steps (logging, callbacks, the loop's own
                work)
  the end       everything else: after the last phase, between phases, outside them

The notes it writes: "goodput" (the percent), "goodput_loss" (the largest cause),
"goodput_parts" (every part with its percent), which the reports print and `stepwatch
diagnose` reads, and "goodput_ns" (every part in ns), from which the JSON report and the HTML
page build their goodput table.
"""
from stepwatch._checkpoint import IN_STEPS_NOTE

__all__ = ["parts", "note", "line", "ns_note"]

CAUSES = ("start-up", "compilation", "data wait", "warm-up", "evaluation", "checkpoints", "idle",
          "the end")


def _total(row):
    return (row["total_ns"] + row["warmup_total_ns"]) if row else 0


def _compiled(notes, warmup_steps):
    """ns compiling in warm-up steps and in steady ones, from the "compiled_steps" note."""
    warm = steady = 0
    for pair in (notes.get("compiled_steps") or "").split(","):
        step, _, ns = pair.partition(":")
        if step.isdigit() and ns.isdigit():
            if int(step) < warmup_steps:
                warm += int(ns)
            else:
                steady += int(ns)
    return warm, steady


def _note_ns(info, name):
    value = (info.get("notes") or {}).get(name) or ""
    return int(value) if value.isdigit() else 0


def parts(snapshot):
    """{"wall_ns", "goodput" (percent), "steady_ns", cause: ns for every cause}, or None for
    a run without training steps."""
    info = snapshot.info()
    rows = {(r["phase"], r["action"]): r for r in snapshot.records()
            if r["phase"] not in ("all",)}
    step = rows.get(("train", "step"))
    wall = info["wall_ns"]
    if step is None or wall <= 0:
        return None
    data = rows.get(("train", "data"))
    compile_ns = sum(_total(r) for (phase, action), r in rows.items() if action == "compile")
    warm_c, steady_c = _compiled(info.get("notes") or {}, info.get("warmup_steps", 0))
    if warm_c + steady_c == 0:  # no note: compilations count against the warm-up first
        warm_c = min(compile_ns, step["warmup_total_ns"])
        steady_c = compile_ns - warm_c
    steady_data = data["total_ns"] if data else 0
    warm_data = data["warmup_total_ns"] if data else 0
    # the adapters' "checkpoint" (one span a save, whatever ran inside it) where it was
    # timed; else the actions named for checkpoints or saving (a C loop's, a user's)
    saves = {k: r for k, r in rows.items() if k[0] in ("train", "fit") and k[1] == "checkpoint"}
    if not saves:
        saves = {(phase, action): r for (phase, action), r in rows.items()
                 if phase in ("train", "fit") and ("checkpoint" in action.lower()
                                                   or "save" in action.lower())}
    checkpoints = sum(_total(r) for r in saves.values())
    # the saves inside steps (stepwatch._checkpoint's note) come out of the steady steps'
    # time first, then the warm-up's: a checkpoint counts once
    in_steps = min(checkpoints, _note_ns(info, IN_STEPS_NOTE))
    steady = step["total_ns"] - steady_data - steady_c
    steady_saves = min(in_steps, max(0, steady))
    steady = max(0, steady - steady_saves)
    warmup = max(0, step["warmup_total_ns"] - warm_data - warm_c - (in_steps - steady_saves))
    train_phase = _total(rows.get(("fit", "train")))
    out = {
        "start-up": _total(rows.get(("fit", "startup"))),
        "compilation": compile_ns,
        "data wait": steady_data + warm_data,
        "warm-up": warmup,
        "evaluation": _total(rows.get(("fit", "valid"))),
        "checkpoints": checkpoints,
        "idle": max(0, train_phase - _total(step) - (checkpoints - in_steps)),
    }
    # stepwatch.torch's start-up ends when the first step is found, which can be after that
    # step began: the overlap is the first step's, so start-up gives it back
    over = steady + sum(out.values()) - wall
    if over > 0:
        out["start-up"] = max(0, out["start-up"] - over)
    out["the end"] = max(0, wall - steady - sum(out.values()))
    out.update(wall_ns=wall, steady_ns=steady, goodput=100.0 * steady / wall)
    return out


def line(p):
    """"goodput 93.1 % of 10.1 s; lost: start-up 4.0 %, data wait 2.0 %, ..." (the
    causes over 0.05 %, largest first)."""
    from stepwatch._stepwatch import scale_time
    lost = sorted(((p[c], c) for c in CAUSES if p[c] > 0), reverse=True)
    shown = ", ".join(f"{c} {100.0 * ns / p['wall_ns']:.1f} %" for ns, c in lost
                      if 100.0 * ns / p["wall_ns"] >= 0.05)
    return f"{p['goodput']:.1f} % of {scale_time(p['wall_ns'] / 1e9)} in steady training " \
           f"steps" + (f"; lost: {shown}" if shown else "")


def ns_note(p):
    """"wall:N,steady:N,start-up:N,...": the parts in ns, every cause in CAUSES' order, which
    the JSON report's and the HTML page's goodput table read (src/report/goodput_table.c)."""
    pairs = [("wall", p["wall_ns"]), ("steady", p["steady_ns"])] + [(c, p[c]) for c in CAUSES]
    return ",".join(f"{name}:{int(ns)}" for name, ns in pairs)


def note(profiler):
    """Write the run's goodput into profiler's notes, and onto the "efficiency" line when
    FLOPs were counted; the parts, or None (no training steps, or a closed profiler)."""
    if profiler.closed:
        return None
    snapshot = profiler.snapshot()
    p = parts(snapshot)
    if p is None:
        return None
    loss = max(CAUSES, key=lambda c: p[c])
    profiler.note("goodput", f"{p['goodput']:.1f}")
    profiler.note("goodput_loss", f"{loss}:{100.0 * p[loss] / p['wall_ns']:.1f}")
    profiler.note("goodput_parts", line(p)[:511])
    profiler.note("goodput_ns", ns_note(p))
    efficiency = (snapshot.info().get("notes") or {}).get("efficiency")
    if efficiency and "goodput" not in efficiency:
        profiler.note("efficiency", f"{efficiency}; goodput {p['goodput']:.1f} %"[:511])
    return p
