"""stepwatch in a Jupyter notebook: a rich display of a Profiler and a Snapshot (their
``_repr_html_``: the at-a-glance bar of the steady step and the top of the actions table, in
the HTML report's colours), and a display in the cell kept current during a fit::

    with stepwatch.notebook.live(prof):      # redrawn every 3 s in the cell, as fastprogress
        train()                              # does; stays as the final summary at the end

``live(prof, every_s=3, live=False)`` does nothing (the switch for code that runs both in and
out of notebooks). The redraws come from a background thread reading snapshots (in C); the
training thread is never touched, and a display that fails ends the redraws quietly.

The framework adapters (Lightning's Profiler, Ignite's profilers, fastai's callbacks, HF's
Callback, ``stepwatch.torch.instrument()``) open that display themselves during a fit when
they run in a Jupyter kernel (``auto``); ``live=False`` to any of them, or
``STEPWATCH_LIVE=0``, keeps it off. Their objects display as the same summary
(``repr_html``).
"""
import html
import os
import sys
import threading
from typing import Any

from ._stepwatch import Profiler, Snapshot

__all__ = ["summary_html", "live", "in_kernel", "wanted", "auto", "finish", "repr_html"]

# The HTML report's category colours (src/analysis/html/report.js).
COLORS = {"data": "#e4572e", "forward": "#4c78a8", "loss": "#72b7b2", "backward": "#54a24b",
          "optimizer": "#b279a2", "zero_grad": "#9d755d", "callback": "#eeca3b",
          "collective": "#ff9da6", "other": "#bab0ac"}
TOP = 8  # rows of the actions table shown


def _dur(ns: float | None) -> str:
    if ns is None or ns != ns:
        return "-"
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "\u00b5s")):
        if abs(ns) >= scale * 0.9995:
            x = ns / scale
            return f"{x:.{2 if x < 9.995 else 1 if x < 99.95 else 0}f} {unit}"
    return f"{ns:.0f} ns"


def _breakdown(rows: list[dict[str, Any]]) -> tuple[float, int, dict[str, float]]:
    """The mean step and its parts per category: the self time of each category's actions
    (phase "all") per step; "other" is the rest of the step."""
    step = next((r for r in rows if r["action"] == "step" and r["phase"] == "all"), None)
    step = step or next((r for r in rows if r["action"] == "step"), None)
    if not step or not step["count"]:
        return 0.0, 0, {}
    n = step["count"]
    parts = {c: 0.0 for c in COLORS}
    for r in rows:
        if r["phase"] == "all" and r["action"] != "step" and r["category"] in parts \
                and r["category"] != "other":
            parts[r["category"]] += r["self_ns"] / n
    mean = step["total_ns"] / n
    parts["other"] = max(0.0, mean - sum(parts.values()))
    return mean, n, {c: v for c, v in parts.items() if v > 0}


def summary_html(snap: Snapshot | Profiler) -> str:
    """The at-a-glance bar and the top of the actions table of snap (or of a Profiler now)."""
    if isinstance(snap, Profiler):
        snap = snap.snapshot()
    info, rows = snap.info(), snap.records()
    mean, steps, parts = _breakdown(rows)
    out = ['<div class="stepwatch" style="font-family:system-ui,sans-serif;font-size:13px;'
           'max-width:900px">',
           f'<div style="font-weight:600;font-size:15px">stepwatch \u2014 '
           f'{html.escape(str(info.get("name") or "stepwatch"))}</div>',
           f'<div style="color:#666">steps: <span data-sw="steps">{info.get("steps", 0)}</span>'
           f' \u00b7 mean step {_dur(mean)}</div>']
    if parts:
        out.append('<div data-sw="bar" style="display:flex;height:22px;margin:6px 0;'
                   'border-radius:2px;overflow:hidden">')
        for cat, ns in parts.items():
            pct = 100 * ns / mean
            label = f"{cat} {_dur(ns)}" if pct > 12 else ""
            out.append(f'<div title="{cat} {_dur(ns)} ({pct:.1f} %)" data-cat="{cat}" '
                       f'style="width:{pct:.3f}%;background:{COLORS[cat]};color:#fff;'
                       f'white-space:nowrap;overflow:hidden;padding:2px 4px;box-sizing:border-box">'
                       f'{label}</div>')
        out.append("</div><div style=\"color:#444\">" + " \u00b7 ".join(
            f'<span style="color:{COLORS[c]}">\u25a0</span> {c} {_dur(ns)} '
            f'({100 * ns / mean:.1f} %)' for c, ns in parts.items()) + "</div>")
    top = sorted((r for r in rows if r["phase"] == "all"), key=lambda r: -r["total_ns"])[:TOP]
    if top:
        out.append('<table data-sw="actions" style="border-collapse:collapse;margin-top:8px">'
                   "<tr>" + "".join(f'<th style="text-align:{a};padding:2px 8px;border-bottom:'
                                    f'1px solid #ccc">{h}</th>'
                                    for h, a in (("Action", "left"), ("Calls", "right"),
                                                 ("Mean", "right"), ("p50", "right"),
                                                 ("p99", "right"), ("Total", "right"),
                                                 ("%", "right"))) + "</tr>")
        for r in top:
            cells = [html.escape(r["action"]), str(r["count"]), _dur(r["mean_ns"]),
                     _dur(r["p50_ns"]), _dur(r["p99_ns"]), _dur(r["total_ns"]),
                     f'{r["percent"]:.1f} %' if r["percent"] is not None else "-"]
            out.append("<tr>" + "".join(
                f'<td style="text-align:{"left" if k == 0 else "right"};padding:2px 8px;'
                f'font-family:{"monospace" if k == 0 else "inherit"}">{c}</td>'
                for k, c in enumerate(cells)) + "</tr>")
        out.append("</table>")
    out.append("</div>")
    return "".join(out)


def _repr_html_(self: Any) -> str:
    return summary_html(self)


# The rich display in Jupyter (IPython asks objects for _repr_html_); Snapshot, an immutable
# type, has its own in C (python/_stepwatch/_snapshot.c) that calls summary_html.
Profiler._repr_html_ = _repr_html_  # type: ignore[attr-defined]


class live:
    """A display in the notebook cell, redrawn every ``every_s`` seconds from prof's
    snapshot while the block runs, and once more at its end (the final summary)."""

    def __init__(self, prof: Profiler, every_s: float = 3.0, live: bool = True) -> None:
        if every_s <= 0:
            raise ValueError("live: every_s must be above 0")
        self._prof, self._every, self._on = prof, every_s, live
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self.redraws = 0

    def _draw(self) -> bool:
        try:
            from IPython.display import HTML
            self._handle.update(HTML(summary_html(self._prof)))
            self.redraws += 1
            return True
        except Exception:  # a display gone (kernel busy, widget closed): stop redrawing
            return False

    def _run(self) -> None:
        while not self._stop.wait(self._every) and self._draw():
            pass

    def __enter__(self) -> "live":
        if not self._on:
            return self
        try:
            from IPython.display import HTML, display
        except ImportError:
            self._on = False  # not in IPython: nothing to draw into
            return self
        self._handle = display(HTML(summary_html(self._prof)), display_id=True)
        if self._handle is None:
            self._on = False
            return self
        self._thread = threading.Thread(target=self._run, name="stepwatch-notebook", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._on:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._draw()


def in_kernel() -> bool:
    """Is this a Jupyter kernel (IPython's kernel shell, not a terminal IPython)?"""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def wanted(on: bool | None = None) -> bool:
    """Would auto() show a display: on True, or None in a Jupyter kernel (not with
    STEPWATCH_LIVE=0)?"""
    return on is True or (on is None and os.environ.get("STEPWATCH_LIVE") != "0"
                          and in_kernel())


last: live | None = None  # the display auto() opened last (its redraws count)


def _every_s(default: float) -> float:
    """STEPWATCH_LIVE_INTERVAL_MS (the status line's period too; 500 ms at least)."""
    try:
        return max(0.5, float(os.environ["STEPWATCH_LIVE_INTERVAL_MS"]) / 1000)
    except (KeyError, ValueError):
        return default


def auto(prof: Profiler | None, on: bool | None = None, every_s: float = 3.0) -> live | None:
    """For the adapters, at the start of a fit: prof's display in the cell, redrawn every
    every_s seconds (STEPWATCH_LIVE_INTERVAL_MS overrides), when on is True, or None (the
    default) and this is a Jupyter kernel and STEPWATCH_LIVE is not 0. The display
    (finish() it at the fit's end) or None. Never raises: the fit goes on without a display
    that cannot start."""
    global last
    if prof is None or not wanted(on):
        return None
    try:
        shown = live(prof, every_s=_every_s(every_s)).__enter__()
    except Exception:
        return None
    if not shown._on:
        return None
    last = shown
    return shown


def finish(shown: live | None) -> None:
    """The fit ended: stop auto()'s redraws and draw the final summary (None: nothing)."""
    if shown is not None:
        try:
            shown.__exit__(None, None, None)
        except Exception:
            pass


def repr_html(prof: Profiler | None) -> str:
    """An adapter's rich display: its profiler's summary, or a line while nothing records."""
    if prof is None:
        return ('<div class="stepwatch" style="font-family:system-ui,sans-serif;color:#666">'
                "stepwatch: nothing recorded yet</div>")
    return summary_html(prof)
