"""stepwatch.flops: FLOPs counted over the real training step, against hand counts; the
count leaves training as it was (bit for bit); the peak table; tokens/s; the report line."""
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import stepwatch  # noqa: E402
from stepwatch import flops as swflops  # noqa: E402
from stepwatch import peaks  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded 2-core VM: keep torch from spinning
    yield
    torch.set_num_threads(old)


def train(model, batches, watch_kwargs=None, steps_opt=True, warmup=1, lr=0.05):
    """A plain loop under a Profiler (steps marked by hand); returns (losses, figures, prof)."""
    prof = stepwatch.Profiler(warmup_steps=warmup)
    w = swflops.watch(prof, **(watch_kwargs or {})) if watch_kwargs is not None else None
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if steps_opt else None
    losses = []
    with prof.phase("train"):
        for x, y in batches:
            with prof.step(len(x)):
                out = model(x)
                loss = F.mse_loss(out, y) if out.dtype.is_floating_point and out.dim() == 2 \
                    and out.shape == y.shape else F.cross_entropy(out.flatten(0, 1), y.flatten())
                loss.backward()
                if opt is not None:
                    opt.step()
                    opt.zero_grad()
                else:
                    with torch.no_grad():
                        for p in model.parameters():
                            p -= lr * p.grad
                            p.grad = None
                losses.append(loss.item())
    figures = w.close() if w is not None else None
    return losses, figures, prof


def linear_stack(dims):
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def test_linear_stack_equals_hand_count():
    torch.manual_seed(0)
    dims, batch = [24, 48, 40, 8], 16
    model = linear_stack(dims)
    data = [(torch.randn(batch, dims[0]), torch.randn(batch, dims[-1])) for _ in range(4)]
    _, f, _ = train(model, data, {})
    mm = [2 * batch * a * b for a, b in zip(dims, dims[1:])]
    assert f["flops_forward"] == sum(mm)
    # backward: every weight's gradient, and the input's gradient of all but the first layer
    # (the model's input needs none)
    assert f["flops_backward"] == sum(mm) + sum(mm[1:])
    assert f["flops_per_step"] == 2 * sum(mm) + sum(mm[1:])
    assert f["counted_steps"] == [0] and f["steps"] == 4
    assert f["flops_optimizer"] > 0  # SGD's elementwise update, not in the model FLOPs
    assert "aten.relu" in f["uncounted"]  # elementwise work without a formula is named


class MatmulLoop(nn.Module):
    def __init__(self, n, k):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / n)
        self.k = k

    def forward(self, x):
        for _ in range(self.k):
            x = x @ self.w
        return x


def test_matmul_loop_equals_hand_count_without_optimizer():
    torch.manual_seed(1)
    n, k, batch = 32, 5, 12
    model = MatmulLoop(n, k)
    data = [(torch.randn(batch, n), torch.randn(batch, n)) for _ in range(3)]
    _, f, _ = train(model, data, {}, steps_opt=False)
    one = 2 * batch * n * n
    assert f["flops_forward"] == k * one
    # each matmul's backward: the weight's gradient, and the input's for all but the first
    assert f["flops_backward"] == k * one + (k - 1) * one
    assert f["flops_optimizer"] == 0  # a hand-written update: no optimizer step to count


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=96, d=64, layers=2, heads=4, block=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def test_small_gpt_follows_6n_plus_attention():
    torch.manual_seed(2)
    vocab, d, layers, block, batch = 96, 64, 2, 32, 4
    model = TinyGPT(vocab, d, layers, 4, block)
    data = [(torch.randint(vocab, (batch, block)), torch.randint(vocab, (batch, block)))
            for _ in range(3)]
    _, f, _ = train(model, data, {})
    # N without the position embedding (nanoGPT's non_embedding count; wte is the tied head)
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    tokens = batch * block
    formula = 6 * n * tokens + 12 * layers * d * block * tokens
    assert abs(f["flops_per_step"] - formula) <= 0.05 * formula, (f["flops_per_step"], formula)
    assert f["tokens_per_step"] == tokens
    assert f["items_source"].startswith("2-D integer input")
    # attention on the CPU is counted (its flash kernel has a formula of stepwatch's)
    assert not any("scaled_dot_product" in k for k in f["uncounted"])


class DropBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.bn, self.b = nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Linear(32, 4)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.bn(self.a(x)))))


def run_dropbn(with_flops):
    torch.manual_seed(3)
    model = DropBN()
    data = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(6)]
    data.append((torch.randn(5, 16), torch.randn(5, 4)))  # a new shape: counted again
    losses, f, _ = train(model, data, {} if with_flops else None)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    grads = [p.grad for p in model.parameters()]
    return losses, state, torch.get_rng_state(), grads, f


def test_counting_leaves_training_bit_for_bit():
    plain = run_dropbn(False)
    counted = run_dropbn(True)
    assert counted[0] == plain[0]  # every loss, exactly (dropout's RNG draws are the same)
    for k in plain[1]:  # weights and BatchNorm's running statistics
        assert torch.equal(counted[1][k], plain[1][k]), k
    assert torch.equal(counted[2], plain[2])  # the RNG state after the run
    assert all(g is None for g in counted[3])  # no gradient left behind
    f = counted[4]
    assert f["counted_steps"] == [0, 6]  # the first step, and the step of the new shape


def test_recount_on_new_shape_and_total():
    torch.manual_seed(4)
    model = linear_stack([8, 16, 4])
    data = [(torch.randn(b, 8), torch.randn(b, 4)) for b in (6, 6, 6, 3)]
    _, f, _ = train(model, data, {})
    per_row = 2 * 8 * 16 + 2 * 16 * 4
    fwd_total = per_row * (6 * 3 + 3)
    assert f["flops_forward"] == fwd_total / 4
    assert f["counted_steps"] == [0, 3]


def test_achieved_is_count_over_measured_time():
    torch.manual_seed(5)
    model = linear_stack([32, 64, 8])
    data = [(torch.randn(16, 32), torch.randn(16, 8)) for _ in range(5)]
    _, f, prof = train(model, data, {"peak_flops": 1e12})
    step = next(r for r in prof.records("train") if r["action"] == "step")
    achieved = f["flops_per_step"] / (step["total_ns"] / step["count"] * 1e-9)
    assert math.isclose(f["tflops_achieved"] * 1e12, achieved, rel_tol=1e-12)
    assert math.isclose(f["mfu"], achieved / 1e12, rel_tol=1e-12)  # the given peak
    notes = prof.snapshot().info()["notes"]
    assert float(notes["flops_per_step"]) == f["flops_per_step"]
    assert "% MFU, given" in notes["efficiency"]


def test_cpu_mfu_is_unknown_not_guessed():
    torch.manual_seed(6)
    _, f, prof = train(linear_stack([8, 8]), [(torch.randn(4, 8), torch.randn(4, 8))] * 3, {})
    assert f["mfu"] is None and f["peak_flops"] is None and f["peak_device"] == "cpu"
    notes = prof.snapshot().info()["notes"]
    assert "mfu" not in notes
    assert "MFU unknown" in notes["efficiency"]


def test_flops_per_batch_int_and_callable():
    torch.manual_seed(7)
    data = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(3)]
    _, f, _ = train(linear_stack([8, 8]), data, {"flops_per_batch": 1000})
    assert f["flops_per_step"] == 1000 and f["counted_steps"] == [] and f["flops_forward"] is None
    _, f, _ = train(linear_stack([8, 8]), data, {"flops_per_batch": lambda x: 10 * len(x)})
    assert f["flops_per_step"] == 40 and f["source"] == "flops_per_batch"


def test_length_fn_and_validation_not_counted():
    torch.manual_seed(8)
    model = linear_stack([8, 8])
    prof = stepwatch.Profiler()
    w = swflops.watch(prof, length_fn=lambda x: 3 * len(x))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with prof.phase("train"):
        for _ in range(3):
            with prof.step(4):
                F.mse_loss(model(torch.randn(4, 8)), torch.zeros(4, 8)).backward()
                opt.step()
                opt.zero_grad()
    model.eval()
    with torch.no_grad():
        model(torch.randn(50, 8))  # validation: neither FLOPs nor tokens of training
    f = w.close()
    assert f["tokens_per_step"] == 12 and f["items_source"] == "length_fn"
    assert f["flops_forward"] == 2 * 4 * 8 * 8 and f["forwards"] == 3


def test_bad_options_are_named():
    prof = stepwatch.Profiler()
    with pytest.raises(ValueError, match="peak_flops"):
        swflops.watch(prof, peak_flops=-1)
    with pytest.raises(ValueError, match="flops_per_batch"):
        swflops.watch(prof, flops_per_batch="many")
    with pytest.raises(ValueError, match="flops must be"):
        stepwatch.torch.Instrumentation(prof, flops="yes")


@pytest.mark.parametrize("name,label", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"), ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe"), ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"), ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("Tesla T4", "T4"), ("NVIDIA A10G", "A10G"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200"), ("AMD Instinct MI250X", "MI250X"),
    ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 4080", "RTX 4080"),
    ("Tesla L40", "L40"), ("NVIDIA L40", "L40"), ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"), ("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti"),
    ("NVIDIA GeForce RTX 3080", "RTX 3080"), ("NVIDIA GeForce RTX 3070", "RTX 3070"),
    ("NVIDIA RTX A6000", "RTX A6000"), ("NVIDIA A40", "A40"), ("TITAN RTX", "TITAN RTX"),
    ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti"), ("NVIDIA GeForce RTX 2080", "RTX 2080"),
    ("NVIDIA GeForce RTX 2080 SUPER", "RTX 2080 SUPER"),
    ("NVIDIA GeForce RTX 2070 Super", "RTX 2070 SUPER"), ("Quadro RTX 5000", "Quadro RTX 5000"),
    # parts the table does not hold, and mobile parts (lower clocks): not guessed
    ("NVIDIA GeForce RTX 4080 SUPER", None), ("NVIDIA GeForce RTX 3070 Ti", None),
    ("NVIDIA GeForce RTX 3080 Laptop GPU", None), ("Quadro RTX 5000 with Max-Q Design", None),
    ("NVIDIA RTX A4000", None),
    ("NVIDIA H100", None), ("Tesla V100", None), ("cpu", None), ("", None),
])
def test_device_names(name, label):
    assert peaks.match_device(name) == label


def test_peak_table_rows():
    assert peaks.peak_for("NVIDIA H100 80GB HBM3", "bf16") == ("H100 SXM", 989.5e12)
    assert peaks.peak_for("Tesla T4", "bf16") == ("T4", None)  # T4 has no bf16: not filled in
    assert peaks.peak_for("NVIDIA A100-SXM4-40GB", "tf32") == ("A100 SXM", 156e12)
    assert peaks.peak_for("AMD Instinct MI300X", "fp8") == ("MI300X", 2614.9e12)
    for label, row in peaks.PEAKS.items():
        assert set(row) <= set(peaks.DTYPES), label
        # dense tensor-core figures are above plain fp32, bf16 and fp16 alike
        assert row["fp16"] > row["fp32"] and row.get("bf16", row["fp16"]) == row["fp16"], label
        assert row.get("tf32", row["fp32"]) >= row["fp32"], label  # tf32 never below fp32
    assert peaks.peak_for("NVIDIA GeForce RTX 4090", "bf16") == ("RTX 4090", 165.2e12)
    assert peaks.peak_for("NVIDIA GeForce RTX 2080 Ti", "bf16") == ("RTX 2080 Ti", None)
    with pytest.raises(ValueError, match="dtype"):
        peaks.peak_for("NVIDIA L4", "int8")


def test_compute_dtype():
    model = nn.Linear(4, 4)
    old = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        assert swflops.compute_dtype(model) == "fp32"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert swflops.compute_dtype(model) == "fp32"  # a CPU's matmuls have no tf32
        assert swflops._dtype_name(torch.float32, cuda=True) == "tf32"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert swflops.compute_dtype(model) == "bf16"
        assert swflops.compute_dtype(model.to(torch.float16)) == "fp16"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old[0]
        torch.set_float32_matmul_precision(old[1])


def test_counted_dtype_is_the_matmuls():
    torch.manual_seed(9)
    model = linear_stack([8, 8]).to(torch.bfloat16)
    data = [(torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(4, 8, dtype=torch.bfloat16))] * 3
    _, f, _ = train(model, data, {})
    assert f["compute_dtype"] == "bf16"


LM_SCRIPT = r"""
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
emb, head = nn.Embedding(50, 16), nn.Linear(16, 50)
model = nn.Sequential(emb, nn.Linear(16, 16), nn.Tanh(), head)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(50, (64, 9))
loader = torch.utils.data.DataLoader(ids, batch_size=8)
tokens = 0
for batch in loader:
    x, y = batch[:, :-1], batch[:, 1:]
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward(); opt.step(); opt.zero_grad()
    tokens += x.numel()
print("TOKENS", tokens)
"""


def test_autorun_flops_header_line_and_tokens(tmp_path):
    script = tmp_path / "lm.py"
    script.write_text(LM_SCRIPT)
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "stepwatch.autorun", "--flops",
                          "--run-file", str(tmp_path / "run.db"), str(script)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "TOKENS 512" in run.stdout
    header = [line for line in run.stderr.splitlines() if line.startswith("efficiency: ")]
    assert len(header) == 1 and "FLOP/s achieved (MFU unknown" in header[0], run.stderr
    assert "tokens/s" in header[0]
    snap = stepwatch.load(str(tmp_path / "run.db"))
    notes = snap.info()["notes"]
    # 8 batches of 8x8 tokens; the counted first step is warm-up (--flops without --warmup)
    assert snap.info()["warmup_steps"] == 1
    step = next(r for r in snap.records("train") if r["action"] == "step")
    assert math.isclose(float(notes["tokens_per_s"]),
                        64 / (step["total_ns"] / step["count"] * 1e-9), rel_tol=1e-5)
    # Linear(16,16) and the head per token, forward; backward: both weights, and the head's
    # input gradient and the first Linear's (the embedding's output needs one)
    fwd = 64 * (2 * 16 * 16 + 2 * 16 * 50)
    assert float(notes["flops_forward"]) == fwd
    assert float(notes["flops_backward"]) == 2 * fwd
    assert notes["items_source"].startswith("2-D integer input")
    js = snap.report("json")
    assert '"flops_per_step"' in js and '"efficiency"' in js
    del out
