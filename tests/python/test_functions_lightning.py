"""stepwatch.lightning.AdvancedProfiler in a real Trainer: Lightning's AdvancedProfiler contract
(files per stage and rank, summary/describe, dump_stats, pickling) with stepwatch's function
profiler underneath."""
import copy
import os
import pickle
import pstats
import time

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from stepwatch._stepwatch import _function_hook_state as hook_state  # noqa: E402
from stepwatch.lightning import AdvancedProfiler  # noqa: E402
from test_lightning import Model as LightningTestModel  # noqa: E402

HERE = os.path.basename(__file__)


def slow_feature(x):
    time.sleep(0.002)
    return x


class Model(LightningTestModel):
    """test_lightning's model, its input passed through a Python function that sleeps."""

    def training_step(self, batch, i):
        x, y = batch
        return super().training_step((slow_feature(x), y), i)


def fit(profiler, model=None, batches=6):
    data = DataLoader(TensorDataset(torch.randn(4 * batches, 8), torch.randn(4 * batches, 1)),
                      batch_size=4)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=0, profiler=profiler)
    trainer.fit(model or Model(), data)
    return trainer


def blocks(text):
    """{action: its table} from a summary."""
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("Profile stats for: "):
            name = line[len("Profile stats for: "):]
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def test_fit_writes_the_per_stage_report(tmp_path):
    prof = AdvancedProfiler(dirpath=tmp_path, filename="perf")
    fit(prof)
    text = (tmp_path / "fit-perf.txt").read_text()
    assert text.startswith("FIT Profiler Report")
    tables = blocks(text)
    step = next(v for k, v in tables.items() if k.endswith(".training_step")
                and k.startswith("[Strategy]"))
    # the model's own functions, in the action that ran them, with their calls and time
    row = next(l for l in step.splitlines() if l.endswith(f"(slow_feature)"))
    ncalls, tottime, _, cumtime, _ = row.split()[:5]
    assert ncalls == "6" and float(cumtime) >= 6 * 0.002
    assert "{built-in method time.sleep}" in step
    # nested actions show in their outer action as one line
    assert any("{stepwatch action " in v for v in tables.values())
    assert "run_training_batch" in tables
    assert hook_state()["hook"] == "off"
    assert prof._output_file is None  # describe closed it (Lightning's teardown contract)


def test_dump_stats_one_file_per_action(tmp_path):
    prof = AdvancedProfiler(dirpath=tmp_path, filename="perf", dump_stats=True)
    with prof.profile("load/a:b"):
        slow_feature(1)
    prof.setup("fit", local_rank=1)
    with prof.profile("other"):
        slow_feature(2)
    prof.describe()
    names = sorted(os.listdir(tmp_path))
    assert names == ["fit-perf-1-load_a_b.prof", "fit-perf-1-other.prof", "fit-perf-1.txt"]
    for name in names[:2]:
        stats = pstats.Stats(str(tmp_path / name))
        assert any(k[2] == "slow_feature" for k in stats.stats)
    text = (tmp_path / "fit-perf-1.txt").read_text()
    assert "Profile stats for: other rank: 1" in text


def test_restriction_and_profiled_actions(tmp_path):
    prof = AdvancedProfiler(line_count_restriction=2)
    for _ in range(3):
        with prof.profile("a"):
            slow_feature(0)
            sorted([3, 1, 2])
    stats = prof.profiled_actions["a"]
    assert sum(e.inlinetime for e in stats.getstats()) == pytest.approx(
        stats.total_ns / 1e9, rel=0.1)
    assert "List reduced from " in prof.summary() and "due to restriction <2>" in prof.summary()
    with pytest.raises(ValueError, match="Attempting to stop recording an action"):
        prof.stop("never")
    prof.start("b")
    prof.stop("b")
    assert set(prof.profiled_actions) == {"a", "b"}


def test_timing_table_and_python_only(tmp_path):
    prof = AdvancedProfiler(dirpath=tmp_path, filename="perf", builtins=False, timing=True)
    fit(prof)
    summary = (tmp_path / "fit-perf.txt").read_text()
    assert "{built-in method" not in summary  # Python functions only
    assert "slow_feature" in summary
    # the stepwatch timing table of the same actions follows the function tables
    assert "run_training_batch" in summary.split("Profile stats for:")[-1]


def test_pickles_without_its_data(tmp_path):
    prof = AdvancedProfiler(dirpath=tmp_path, filename="perf", line_count_restriction=0.5)
    fit(prof, batches=2)
    for clone in (copy.deepcopy(prof), pickle.loads(pickle.dumps(prof))):
        assert clone.line_count_restriction == 0.5 and clone.filename == "perf"
        assert clone.profiled_actions == {}
        with clone.profile("x"):
            slow_feature(0)
        assert "slow_feature" in clone.summary()


def test_a_failing_fit_leaves_no_hook_on(tmp_path):
    prof = AdvancedProfiler(dirpath=tmp_path, filename="perf")
    with pytest.raises(RuntimeError, match="boom"):
        fit(prof, model=Model(fail_at=2))
    assert hook_state() == dict(hook_state(), hook="off", open=0, frame_hook_installed=False)
    assert any(k.startswith("[Strategy]") for k in prof.profiled_actions)
