"""stepwatch in Jupyter (python/stepwatch/notebook.py): Profiler's and Snapshot's rich display,
and the display kept current during a fit, run in a real kernel (nbclient, ipykernel); the
HTML the cell kept is drawn in real headless Chromium."""
import os
import sys

import pytest

import stepwatch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cdp import Browser  # noqa: E402

SHOTS = os.environ.get("SW_LIVE_SHOTS")


def busy_profiler(steps=40, **kw):
    p = stepwatch.Profiler(name="nb <run>", live=False, **kw)
    for _ in range(steps):
        with p.step(4):
            with p.action("data"):
                sum(range(1000))
            with p.action("forward"):
                sum(range(4000))
            with p.action("backward"):
                sum(range(8000))
    return p


def test_profiler_and_snapshot_have_a_rich_display(tmp_path):
    p = busy_profiler()
    for obj in (p, p.snapshot()):
        page = obj._repr_html_()
        assert 'data-sw="steps">40<' in page
        cats = [c for c in ("data", "forward", "backward") if f'data-cat="{c}"' in page]
        assert cats == ["data", "forward", "backward"], page
        assert "nb &lt;run&gt;" in page and "<run>" not in page  # names escaped
        assert page.count("<tr>") >= 5  # the header and the top actions
    p.close()
    assert 'data-sw="steps">40<' in p._repr_html_()  # the run as it stood at close
    db = tmp_path / "run.db"
    q = busy_profiler(steps=12, run_file=str(db))
    q.close()
    assert 'data-sw="steps">12<' in stepwatch.load(str(db))._repr_html_()


def test_live_is_off_outside_a_kernel_and_with_live_false():
    p = busy_profiler(steps=2)
    with stepwatch.notebook.live(p, every_s=0.1) as lv:  # no IPython display here
        pass
    assert lv.redraws == 0
    with stepwatch.notebook.live(p, live=False) as lv:
        pass
    assert lv.redraws == 0
    with pytest.raises(ValueError):
        stepwatch.notebook.live(p, every_s=0)


CELLS = [
    "import time, stepwatch\n"
    "prof = stepwatch.Profiler(name='notebook fit', live=False)\n",
    # a fit of ~4 s under the live display, redrawn every 0.5 s
    "with stepwatch.notebook.live(prof, every_s=0.5) as lv:\n"
    "    end = time.monotonic() + 4\n"
    "    while time.monotonic() < end:\n"
    "        with prof.step(8):\n"
    "            with prof.action('data'):\n"
    "                time.sleep(0.002)\n"
    "            with prof.action('forward'):\n"
    "                sum(range(20000))\n"
    "            with prof.action('backward'):\n"
    "                sum(range(40000))\n"
    "print('redraws', lv.redraws, 'steps', prof.step_count)\n",
    "prof\n",
    "with stepwatch.notebook.live(prof, live=False):\n    pass\n",
]


def test_live_display_in_a_real_kernel_and_chromium(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    fit = nb.cells[1].outputs
    shown = [o for o in fit if o["output_type"] == "display_data"]
    printed = "".join(o.get("text", "") for o in fit if o["output_type"] == "stream")
    redraws, steps = (int(x) for x in printed.split()[1::2])
    assert redraws >= 4, printed  # about every 0.5 s over 4 s, and once at the end
    # One display kept, updated in place: it shows the final step count.
    assert len(shown) == 1, fit
    kept = shown[0]["data"]["text/html"]
    assert f'data-sw="steps">{steps}<' in kept
    rich = nb.cells[2].outputs[0]
    assert rich["output_type"] == "execute_result" and "text/html" in rich["data"]
    assert f'data-sw="steps">{steps}<' in rich["data"]["text/html"]
    assert nb.cells[3].outputs == []  # live=False: nothing drawn
    page = tmp_path / "cell.html"
    page.write_text(f"<!DOCTYPE html><html><body>{kept}</body></html>")
    browser = Browser(tmp_path, width=1000, height=500)
    try:
        browser.open(page.as_uri())
        browser.wait_for("document.querySelector('[data-sw=bar]') !== null")
        widths = browser.eval("[].map.call(document.querySelectorAll('[data-cat]'),"
                              " function (e) { return e.getBoundingClientRect().width; })")
        bar = browser.eval("document.querySelector('[data-sw=bar]').getBoundingClientRect().width")
        assert len(widths) >= 3 and all(w > 0 for w in widths)
        assert sum(widths) == pytest.approx(bar, rel=0.02)
        rows = browser.eval("document.querySelectorAll('[data-sw=actions] tr').length")
        assert rows >= 5
        browser.screenshot(os.path.join(SHOTS or str(tmp_path), "notebook-cell.png"))
    finally:
        browser.close()
