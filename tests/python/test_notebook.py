"""stepwatch in Jupyter (python/stepwatch/notebook.py): Profiler's and Snapshot's rich display,
and the display kept current during a fit, run in a real kernel (nbclient, ipykernel); the
HTML the cell kept is drawn in real headless Chromium."""
import os
import re
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


# ---- the framework adapters open the display themselves in a kernel ----

ADAPTER_SETUP = r"""
import time, torch, stepwatch, stepwatch.notebook
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)

class Slow(Dataset):  # an item takes 1 ms to load: a batch of 16, 16 ms
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.randn(8), torch.randn(1)

def said(prof):
    shown = stepwatch.notebook.last
    print("redraws", shown.redraws if shown else 0, "steps", prof.snapshot().info()["steps"])
"""

# cell name -> code; each fit of 150 batches lasts 2.5 s or more, redrawn every 0.5 s
# (STEPWATCH_LIVE_INTERVAL_MS)
ADAPTER_CELLS = {
    "instrument": r"""
import stepwatch.torch as swtorch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
inst = swtorch.instrument()
for x, y in DataLoader(Slow(2400), batch_size=16):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
swtorch.uninstrument()
said(inst.profiler)
""",
    "lightning": r"""
import logging, lightning as L
logging.getLogger("lightning").setLevel(logging.ERROR)
class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
    def training_step(self, batch, i):
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
lprof = stepwatch.lightning.Profiler()
trainer = L.Trainer(max_epochs=1, profiler=lprof, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(M(), DataLoader(Slow(2400), batch_size=16))
said(lprof.profiler)
""",
    "ignite": r"""
from ignite.engine import Engine
iprof = stepwatch.ignite.BasicTimeProfiler()
net = torch.nn.Linear(8, 1)
engine = Engine(lambda e, b: torch.nn.functional.mse_loss(net(b[0]), b[1]).item())
iprof.attach(engine)
engine.run(DataLoader(Slow(2400), batch_size=16), max_epochs=1)
said(iprof.profiler)
""",
    "fastai": r"""
import stepwatch.fastai
from fastai.data.core import DataLoaders
from fastai.learner import Learner
dls = DataLoaders(DataLoader(Slow(2400), batch_size=16), DataLoader(Slow(64), batch_size=16))
learn = Learner(dls, torch.nn.Linear(8, 1), loss_func=torch.nn.MSELoss(), lr=0.01)
learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
learn.profile(show_report=False)
main = [cb for cb in learn.cbs if type(cb).__name__ == "ThroughputCallback"][0]
learn.fit(1)
said(main._sw_last_core)
""",
    "transformers": r"""
import transformers
transformers.logging.set_verbosity_error()
from stepwatch.transformers import Callback
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 1)
    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.body(x), labels)}
class Items(Slow):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return {"x": x, "labels": y}
hcb = Callback(report=False)
args = transformers.TrainingArguments(output_dir="hf-out", per_device_train_batch_size=16,
    num_train_epochs=1, report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
    disable_tqdm=True, remove_unused_columns=False)
transformers.Trainer(model=Net(), args=args, train_dataset=Items(2400),
                     callbacks=[hcb]).train()
said(hcb.profiler)
""",
}
REPRS = {"instrument": "inst", "lightning": "lprof", "ignite": "iprof", "fastai": "main",
         "transformers": "hcb"}
OFF = r"""
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with swtorch.instrument(live=False):
    for x, y in DataLoader(Slow(160), batch_size=16):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


def _kept_display(outputs):
    """The stepwatch display a cell kept (one, updated in place) and what the cell printed."""
    shown = [o for o in outputs if o["output_type"] == "display_data"
             and 'class="stepwatch"' in o.get("data", {}).get("text/html", "")]
    printed = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream"
                      and o.get("name") == "stdout")
    return shown, printed


def test_adapters_open_the_display_in_a_kernel_and_display_themselves(tmp_path, monkeypatch):
    """In a real kernel (nbclient, ipykernel) each adapter's fit (stepwatch.torch.instrument,
    Lightning's Profiler, Ignite's BasicTimeProfiler, fastai's learn.profile(), the HF
    Trainer's Callback) opens one display in its cell by itself, redraws it during the fit
    and leaves it as the final summary (the fit's last step count); each adapter's object
    displays itself (_repr_html_); live=False draws nothing."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("torch")
    names = [n for n, mod in (("instrument", "torch"), ("lightning", "lightning"),
                              ("ignite", "ignite"), ("fastai", "fastai.learner"),
                              ("transformers", "transformers"))
             if _importable(mod)]
    assert "instrument" in names
    monkeypatch.setenv("STEPWATCH_LIVE_INTERVAL_MS", "500")
    monkeypatch.delenv("STEPWATCH_LIVE", raising=False)
    nb = nbformat.v4.new_notebook()
    cells = [ADAPTER_SETUP]
    for n in names:
        cells += [ADAPTER_CELLS[n], REPRS[n]]
    cells.append(OFF)
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for k, n in enumerate(names):
        fit, rich = nb.cells[1 + 2 * k].outputs, nb.cells[2 + 2 * k].outputs
        shown, printed = _kept_display(fit)
        m = re.search(r"redraws (\d+) steps (\d+)", printed)
        assert m, (n, fit)
        redraws, steps = int(m.group(1)), int(m.group(2))
        assert len(shown) == 1, (n, fit)
        assert steps >= 100 and f'data-sw="steps">{steps}<' in shown[0]["data"]["text/html"], \
            (n, steps)
        assert redraws >= 3, (n, printed)  # every 0.5 s over 2 s or more, and the final one
        result = [o for o in rich if o["output_type"] == "execute_result"]
        assert result and f'data-sw="steps">{steps}<' in result[0]["data"]["text/html"], (n, rich)
    assert _kept_display(nb.cells[-1].outputs)[0] == []  # live=False: nothing drawn


def _importable(module):
    import importlib.util
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
