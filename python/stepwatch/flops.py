"""stepwatch.flops — FLOPs of a training step, achieved FLOP/s, MFU, tokens/s.

    stepwatch.torch.instrument(flops=True)     # or: stepwatch run --flops -- python train.py
    prof = stepwatch.Profiler(flops=True)   # any loop, marked by hand: the notes at close()
    prof = stepwatch.Profiler(); w = stepwatch.flops.watch(prof)   # the same, closed by hand

How it counts: torch.utils.flop_counter's FlopCounterMode (a dispatch mode) is entered over
one real training step as it runs: from the model's forward to the end of its optimizer step
(or, without an optimizer, to the next forward). No second step, no extra forward: the RNG,
BatchNorm's statistics and the gradients are those the step makes anyway. The ops run inside
the autograd engine are the backward's, those inside ``Optimizer.step`` the optimizer's
(elementwise: one FLOP per output element and arithmetic op, two for addcmul/addcdiv; not in
the model FLOPs MFU is taken of), the rest the forward's. A step whose inputs have shapes not
seen before is counted again; a shape seen before costs a dictionary look-up.

What the count cannot see is said, never hidden: ops without a FLOP formula (elementwise work,
custom kernels) are listed with their calls, and compiled regions (torch.compile) are named.

The figures go to the profiler's notes (the run file, the JSON, the reports' header line):
flops_forward/backward/optimizer (per step), tflops_forward/backward/optimizer (each against
its phase's host time), mfu_forward/backward, flops_per_step, tflops_achieved, mfu,
peak_flops, peak_device, compute_dtype, tokens_per_s, items_source, flops_uncounted,
flops_counted_steps, efficiency (the line the text report prints).
"""
import collections
import functools
import math
import weakref

import torch
from torch.utils.flop_counter import FlopCounterMode
import torch.optim.optimizer as _optim

from stepwatch import peaks as _peaks
from stepwatch.torch import _optimizer_exists  # has any optimizer been made?

__all__ = ["StepCounter", "Watch", "watch", "attach", "count_step", "compute_dtype",
           "device_peak"]

# Ops that move or view data: no FLOPs, so not worth naming as uncounted.
_NO_WORK = frozenset("""
view _unsafe_view reshape t transpose permute expand clone copy_ _to_copy detach alias slice
select unsqueeze squeeze split split_with_sizes cat stack zeros_like ones_like empty empty_like
new_empty new_empty_strided new_zeros new_ones fill_ zero_ as_strided contiguous index_select
embedding unbind lift_fresh arange full scalar_tensor _local_scalar_dense empty_strided
slice_backward select_backward copy zeros ones detach_ _reshape_alias expand_as unsqueeze_
squeeze_ t_ transpose_ split_backward unsafe_split _has_compatible_shallow_copy_type
is_same_size resize_ set_ lift item _foreach_zero_ native_dropout native_dropout_backward
""".split())

# Elementwise arithmetic counted in the optimizer step: FLOPs per output element.
_OPTIMIZER_OPS = {
    "add": 1, "add_": 1, "sub": 1, "sub_": 1, "mul": 1, "mul_": 1, "div": 1, "div_": 1,
    "sqrt": 1, "sqrt_": 1, "lerp": 2, "lerp_": 2, "addcmul": 2, "addcmul_": 2,
    "addcdiv": 2, "addcdiv_": 2, "neg": 1, "maximum": 1, "pow": 1, "pow_": 1,
}


def _cpu_attention():
    """FLOP formulas for the CPU's attention kernels, which torch's registry lacks (their
    FLOPs are those of the CUDA kernels it has: two matmuls forward, four backward)."""
    from torch.utils import flop_counter as fc
    aten = torch.ops.aten
    mapping = {}
    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu", fc.sdpa_flop),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward",
                           fc.sdpa_backward_flop)):
        if hasattr(aten, name):
            # torch's formulas are already shape-wrapped: marked raw, not wrapped again
            raw = functools.partial(formula)
            raw._get_raw = True
            mapping[getattr(aten, name)] = raw
    return mapping


def _elements(value):
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_elements(v) for v in value)
    return 0


class StepCounter(FlopCounterMode):
    """FlopCounterMode that splits the count into forward, backward and optimizer, notes the
    dtype and device of the FLOPs, and lists the ops it had no formula for.

    Its module tracker is left out: it would put hooks on every module and on the step's
    tensors, and the split needs no module names."""

    def __init__(self):
        super().__init__(display=False, custom_mapping=_cpu_attention())
        self.phases = {"forward": 0, "backward": 0, "optimizer": 0}
        self.uncounted = collections.Counter()   # op name -> calls without a formula
        self.dtypes = collections.Counter()      # "bf16" ... -> FLOPs
        self.devices = collections.Counter()     # torch.device -> FLOPs
        self.in_optimizer = 0

    def __enter__(self):
        self.flop_counts.clear()
        from torch.utils.flop_counter import _FlopCounterMode
        self.mode = _FlopCounterMode(self)
        self.mode.__enter__()
        return self

    def __exit__(self, *args):
        mode, self.mode = self.mode, None
        return mode.__exit__(*args) if mode is not None else False

    def _count_flops(self, func_packet, out, args, kwargs):
        name = func_packet.__name__ if hasattr(func_packet, "__name__") else str(func_packet)
        if self.in_optimizer:
            per = _OPTIMIZER_OPS.get(name.removeprefix("_foreach_"))
            if per is not None:
                self.phases["optimizer"] += per * _elements(out)
            return out
        formula = self.flop_registry.get(func_packet)
        if formula is None:
            if name not in _NO_WORK:
                self.uncounted[f"aten.{name}"] += 1
            return out
        n = formula(*args, **kwargs, out_val=out)
        backward = torch._C._current_graph_task_id() != -1
        self.phases["backward" if backward else "forward"] += n
        self.flop_counts["Global"][func_packet] += n
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None:
            self.dtypes[_dtype_name(first.dtype, first.device.type == "cuda")] += n
            self.devices[first.device] += n
        return out


def _dtype_name(dtype, cuda=True):
    """"fp32", "tf32", "bf16", "fp16", "fp8" (peaks.DTYPES), else torch's name. float32 is
    tf32 where the matmuls may use it: on a GPU that allow_tf32 or the float32 matmul
    precision lets (cuda=False: a CPU, where neither applies)."""
    if dtype == torch.float32:
        tf32 = torch.backends.cuda.matmul.allow_tf32 or \
            torch.get_float32_matmul_precision() != "highest"
        return "tf32" if tf32 and cuda else "fp32"
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if "float8" in str(dtype):
        return "fp8"
    return str(dtype).removeprefix("torch.")


def compute_dtype(model=None):
    """The dtype the matmuls run in: autocast's when it is on, else the parameters' (float32
    read as tf32 when torch.backends.cuda.matmul.allow_tf32 or the float32 matmul precision
    allows it)."""
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return _dtype_name(torch.get_autocast_dtype(device))
    if model is not None:
        for p in model.parameters():
            if p.is_floating_point():
                return _dtype_name(p.dtype, p.device.type == "cuda")
    return _dtype_name(torch.get_default_dtype())


def device_peak(device, dtype, peak_flops=None):
    """(label, peak FLOP/s) for a torch.device and dtype name: the user's peak_flops first,
    else the table's figure for a CUDA device, else (label or "cpu", None): unknown."""
    if peak_flops is not None:
        return "given", float(peak_flops)
    if device is None or device.type != "cuda":
        return (device.type if device is not None else None), None
    try:
        name = torch.cuda.get_device_name(device)
    except Exception:  # a device the runtime cannot name: unknown, not guessed
        return None, None
    label, peak = _peaks.peak_for(name, dtype) if dtype in _peaks.DTYPES else (None, None)
    return label or name, peak


def count_step(step, *args, **kwargs):
    """Run step(*args, **kwargs) once under a StepCounter; (its result, the counter)."""
    counter = StepCounter()
    pre = _optim.register_optimizer_step_pre_hook(lambda *a: _enter_optimizer(counter, 1))
    post = _optim.register_optimizer_step_post_hook(lambda *a: _enter_optimizer(counter, -1))
    try:
        with counter:
            result = step(*args, **kwargs)
    finally:
        pre.remove()
        post.remove()
    return result, counter


def _enter_optimizer(counter, delta):
    counter.in_optimizer = max(0, counter.in_optimizer + delta)


def _tensors(args, kwargs):
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, dict):
            yield from (v for v in value.values() if isinstance(v, torch.Tensor))
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _signature(args, kwargs):
    """The shapes and dtypes of the forward's tensor inputs: what its count is kept under."""
    if not kwargs and len(args) == 1 and isinstance(args[0], torch.Tensor):
        return ((args[0].shape, args[0].dtype),)  # the common call, without the walk
    return tuple((t.shape, t.dtype) for t in _tensors(args, kwargs))


def _tokens(args, kwargs):
    """Tokens in a batch of token ids: the first 2-D integer tensor's elements, with how it
    was found; (0, None) when there is none."""
    for i, t in enumerate(_tensors(args, kwargs)):
        if t.dim() == 2 and not t.is_floating_point() and not t.is_complex() \
                and t.dtype != torch.bool:
            return t.numel(), f"2-D integer input #{i} {list(t.shape)}"
    return 0, None


def _compiled(module):
    dynamo = __import__("sys").modules.get("torch._dynamo")
    if dynamo is None:
        return False
    optimized = getattr(dynamo.eval_frame, "OptimizedModule", ())
    return isinstance(module, optimized) or any(isinstance(m, optimized)
                                                for m in module.modules())


class _Count:
    """The count of one input signature: per forward call (a micro-batch)."""
    __slots__ = ("forward", "backward", "optimizer", "forwards")

    def __init__(self, counter, forwards, optimizer_steps):
        n = max(1, forwards)
        self.forward = counter.phases["forward"] / n
        self.backward = counter.phases["backward"] / n
        self.optimizer = counter.phases["optimizer"] / max(1, optimizer_steps)
        self.forwards = forwards


class Watch:
    """Counts the FLOPs of the training steps a profiler times (see the module's doc).

    flops_per_batch: an int, or a callable of the forward's inputs (args, kwargs) -> int, the
    FLOPs of forward+backward of one batch, as Lightning's: then nothing is counted.
    length_fn: a callable of the same -> items (tokens) in the batch; without it, a 2-D integer
    input is read as token ids. peak_flops: the device's peak FLOP/s, used before the table.
    """

    def __init__(self, profiler, flops_per_batch=None, length_fn=None, peak_flops=None):
        """profiler None: only counts (last_flops, counts), for a front end that reports
        itself (stepwatch.lightning.ThroughputMonitor)."""
        if flops_per_batch is not None and not callable(flops_per_batch) and \
                (not isinstance(flops_per_batch, (int, float)) or flops_per_batch < 0):
            raise ValueError("flops_per_batch must be a number >= 0 or a callable of the batch")
        if peak_flops is not None and (not isinstance(peak_flops, (int, float))
                                       or not peak_flops > 0):
            raise ValueError("peak_flops must be a number > 0 (FLOP/s)")
        if length_fn is not None and not callable(length_fn):
            raise ValueError("length_fn must be a callable of the batch")
        self.profiler = profiler
        self.flops_per_batch = flops_per_batch
        self.length_fn = length_fn
        self.peak_flops = peak_flops
        self.counts = {}            # input signature -> _Count
        self.total = [0.0, 0.0, 0.0]  # forward, backward, optimizer FLOPs of every forward seen
        self.forwards = 0           # training forwards (micro-batches) seen
        self.tokens = 0
        self.items_source = "length_fn" if length_fn is not None else None
        self.uncounted = collections.Counter()
        self.dtypes = collections.Counter()
        self.devices = collections.Counter()
        self.counted_steps = []     # step indexes a count ran in (slower than the others)
        self.compiled = False
        self.root = None            # weakref to the outermost module
        self.last_flops = None      # forward+backward FLOPs of the latest training batch, once known
        self._handles = []
        self._counting = None       # [counter, signature, forwards, optimizer steps] or None
        self._pre = self._post = None  # the optimizer hooks, only while a step is counted
        self._first = None          # the one-shot forward hook of the model's first call
        self._seen = {}             # signature -> (fwd, bwd, opt FLOPs, tokens): the fast path
        self._closed = False
        self._given = None  # flops_per_batch: the hook that notes the first step's FLOPs, once
        self._global = torch.nn.modules.module.register_module_forward_pre_hook(self._find_root)

    # ---- finding the model and counting ---------------------------------------------------

    def _find_root(self, module, args):
        """Until the model is known, every module call passes here: the first training call
        of a module with trainable parameters (its pre-hook runs before its children's) is
        the outermost one. Then this global hook goes and one hook on that module stays.

        A global pre-hook is not given the call's keyword arguments (the HF Trainer passes
        only those): the count starts here, and a one-shot forward hook on the module, which
        torch calls at the end of this same call with them, reads the inputs."""
        if not (torch.is_grad_enabled() and module.training) or \
                not any(p.requires_grad for p in module.parameters()):
            return None
        self._global.remove()
        self._global = None
        self.root = weakref.ref(module)
        self.compiled = _compiled(module)
        self._handles.append(module.register_forward_pre_hook(self._on_forward, with_kwargs=True))
        self._first = module.register_forward_hook(self._first_inputs, with_kwargs=True,
                                                   always_call=True)
        if self.flops_per_batch is None:
            self._start(None)  # its inputs' shapes: at the end of this call
        return None

    def _first_inputs(self, module, args, kwargs, output):
        self._first.remove()
        try:
            self._account(args, kwargs)
            if self._counting is not None and self._counting[1] is None:
                self._counting[1] = _signature(args, kwargs)
        except Exception as exc:  # never fail the step: say so in the notes
            self.uncounted[f"error: {type(exc).__name__}: {exc}"] += 1
        return None

    def _on_forward(self, module, args, kwargs):
        if not (torch.is_grad_enabled() and module.training):
            return None  # validation and inference forwards are not training FLOPs
        try:
            if self._counting is None:  # every step after the count: one look-up
                seen = self._seen.get(_signature(args, kwargs))
                if seen is not None:
                    self.forwards += 1
                    self.tokens += seen[3]
                    self.total[0] += seen[0]
                    self.total[1] += seen[1]
                    self.total[2] += seen[2]
                    self.last_flops = seen[0] + seen[1]
                    return None
            self._forward(args, kwargs)
        except Exception as exc:  # never fail the step: say so in the notes
            self.uncounted[f"error: {type(exc).__name__}: {exc}"] += 1
        return None

    def _account(self, args, kwargs):
        """One training forward: its tokens, and its FLOPs when the user gives them."""
        self.forwards += 1
        batch = args[0] if len(args) == 1 and not kwargs else (args, kwargs)
        if self.length_fn is not None:
            self.tokens += int(self.length_fn(batch))
        else:
            n, how = _tokens(args, kwargs)
            if how is not None:
                self.tokens += n
                self.items_source = self.items_source or how
        if self.flops_per_batch is not None:
            fpb = self.flops_per_batch
            self.total[0] += float(fpb(batch) if callable(fpb) else fpb)  # fwd+bwd, as Lightning
            if self._given is None:
                self._note_given()

    def _forward(self, args, kwargs):
        if self._counting is not None and self._counting[3] == 0 and not self._has_optimizer:
            self._stop()  # no optimizer: the step ran from one forward to the next
        self._account(args, kwargs)
        if self.flops_per_batch is not None:
            return
        if self._counting is not None:
            self._counting[2] += 1
            return
        sig = _signature(args, kwargs)
        count = self.counts.get(sig)
        if count is not None:
            self.last_flops = count.forward + count.backward
            self.total[0] += count.forward
            self.total[1] += count.backward
            self.total[2] += count.optimizer
            if self.length_fn is None:  # the tokens follow from the shapes: kept with them
                self._seen[sig] = (count.forward, count.backward, count.optimizer,
                                   _tokens(args, kwargs)[0])
            return
        self._start(sig)

    def step_end(self):
        """The training step ended, as a front end that knows its loop says (fastai's
        after_batch: its optimizer is no torch.optim one, whose hooks end a count): a count
        in progress ends here."""
        if self._counting is not None:
            self._stop()

    @property
    def _has_optimizer(self):
        return self._post is not None

    def batch_flops(self):
        """Forward+backward FLOPs of the latest training batch: counted, or from
        flops_per_batch; None while its step is still being counted."""
        if self.flops_per_batch is not None:
            return None  # the caller has them
        return self.last_flops

    def running(self):
        """(model FLOPs, tokens) of every training forward so far: a front end that logs
        rates takes differences of these between its logs."""
        return self.total[0] + self.total[1], self.tokens

    def peak(self):
        """(label, peak FLOP/s or None) of the device and dtype the counted FLOPs ran on."""
        dtype = self.dtypes.most_common(1)[0][0] if self.dtypes else compute_dtype()
        device = self.devices.most_common(1)[0][0] if self.devices else None
        return device_peak(device, dtype, self.peak_flops)

    def _start(self, sig):
        counter = StepCounter()
        self.last_flops = None
        self.counted_steps.append(self.profiler.step_index if self.profiler is not None
                                  else self.forwards)
        self._counting = [counter, sig, 1, 0]
        self._pre = _optim.register_optimizer_step_pre_hook(self._optimizer_begins)
        self._post = None
        if _optimizer_exists():
            self._post = _optim.register_optimizer_step_post_hook(self._optimizer_ends)
        counter.__enter__()

    def _optimizer_begins(self, *_args):
        if self._counting is not None:
            if self._post is None:
                self._post = _optim.register_optimizer_step_post_hook(self._optimizer_ends)
            self._counting[0].in_optimizer += 1

    def _optimizer_ends(self, *_args):
        if self._counting is None:
            return
        counter = self._counting[0]
        counter.in_optimizer = max(0, counter.in_optimizer - 1)
        self._counting[3] += 1
        if counter.in_optimizer == 0:
            self._stop()

    def _stop(self):
        counter, sig, forwards, steps = self._counting
        self._counting = None
        counter.__exit__(None, None, None)
        for handle in (self._pre, self._post):
            if handle is not None:
                handle.remove()
        self._pre = self._post = None
        count = _Count(counter, forwards, steps)
        self.counts[sig] = count
        self.last_flops = count.forward + count.backward
        self.total[0] += count.forward * forwards
        self.total[1] += count.backward * forwards
        self.total[2] += count.optimizer * max(1, steps)
        self.uncounted.update(counter.uncounted)
        self.dtypes.update(counter.dtypes)
        self.devices.update(counter.devices)
        self._note_live(count, forwards)

    def _note_given(self):
        """flops_per_batch given: the live line's figures from the first training batch on,
        not only at close. Until the first optimizer step one batch is one step; that step's
        end notes the FLOPs of all its batches (gradient accumulation) and the hook goes."""
        self._given = False
        if self.profiler is None or self.profiler.closed:
            return
        self._note_flops(self.total[0])
        self._given = _optim.register_optimizer_step_post_hook(self._given_step_ends)

    def _given_step_ends(self, *_args):
        if self._given:
            self._given.remove()
            self._given = False
            self._note_flops(self.total[0])  # every batch so far: those of the first step

    def _note_live(self, count, forwards):
        """The live status line's figures, once per count (src/live/live_window.c reads
        them): the model FLOPs of the step just counted and the device's peak. close()
        writes the run's own figures over them."""
        self._note_flops((count.forward + count.backward) * forwards)

    def _note_flops(self, flops_per_step):
        if self.profiler is None or self.profiler.closed:
            return
        self.profiler.note("flops_per_step", _num(flops_per_step))
        peak = self.peak()[1]
        if peak is not None:
            self.profiler.note("peak_flops", _num(peak))

    # ---- the figures ----------------------------------------------------------------------

    def close(self):
        """Stop counting (a step counted to the end of the run ends here) and write the
        figures into the profiler's notes. Idempotent."""
        if self._closed:
            return self.figures()
        self._closed = True
        if self._global is not None:
            self._global.remove()
            self._global = None
        if self._counting is not None:
            self._stop()
        if self._given:
            self._given.remove()
            self._given = False
        for handle in self._handles + ([self._first] if self._first is not None else []):
            handle.remove()
        self._handles.clear()
        if self.profiler is None:
            return None
        figures = self.figures()
        if not self.profiler.closed:
            for key, value in _notes(figures).items():
                self.profiler.note(key, value)
        return figures

    def closing(self):
        """Profiler(flops=...)'s close(), before the profiler goes: the figures, then the
        run's goodput (stepwatch.goodput), into its notes. Never raises into the program."""
        try:
            self.close()
        finally:
            if self.profiler is not None and not self.profiler.closed:
                from stepwatch import goodput
                goodput.note(self.profiler)

    def figures(self):
        """The counts and rates as a dict (the notes' source)."""
        rows = {(r["action"], r["phase"]): r for r in self.profiler.records("train")}
        step = rows.get(("step", "train"))
        steps = (step["count"] + step["warmup_count"]) if step else 0
        per = [x / steps if steps else 0.0 for x in self.total]
        model = per[0] + per[1]
        dtype = self.dtypes.most_common(1)[0][0] if self.dtypes else compute_dtype(
            self.root() if self.root is not None and self.root() is not None else None)
        device = self.devices.most_common(1)[0][0] if self.devices else None
        label, peak = device_peak(device, dtype, self.peak_flops)
        out = {
            "flops_forward": per[0], "flops_backward": per[1], "flops_optimizer": per[2],
            "flops_per_step": model, "compute_dtype": dtype, "peak_device": label,
            "peak_flops": peak, "steps": steps, "forwards": self.forwards,
            "source": "flops_per_batch" if self.flops_per_batch is not None
            else "FlopCounterMode",
            "counted_steps": list(self.counted_steps), "compiled": self.compiled,
            "uncounted": dict(self.uncounted.most_common(8)),
            "tokens_per_step": self.tokens / steps if steps else 0.0,
            "items_source": self.items_source,
        }
        t_step = step["total_ns"] / step["count"] if step and step["count"] else None
        out["tflops_achieved"] = model / t_step * 1e9 / 1e12 if t_step else None
        if self.flops_per_batch is not None:  # one figure for both: no split to show
            out["flops_forward"] = out["flops_backward"] = None
        for phase, i in (("forward", 0), ("backward", 1), ("optimizer", 2)):
            # a phase's time per step: its total over the steady steps, per step (host time)
            row = rows.get((phase, "train"))
            t = row["total_ns"] / step["count"] if row and step and step["count"] else None
            out[f"tflops_{phase}"] = per[i] / t * 1e9 / 1e12 \
                if t and out[f"flops_{phase}"] is not None else None
            # the optimizer's elementwise FLOPs are no model FLOPs: no MFU of its own
            out[f"mfu_{phase}"] = out[f"tflops_{phase}"] * 1e12 / peak \
                if peak and phase != "optimizer" and out[f"tflops_{phase}"] is not None else None
        out["mfu"] = (out["tflops_achieved"] * 1e12 / peak
                      if peak and out["tflops_achieved"] is not None else None)
        out["tokens_per_s"] = out["tokens_per_step"] / t_step * 1e9 if t_step and \
            self.tokens else None
        out["batches_per_s"] = (self.forwards / steps) / t_step * 1e9 if t_step and steps \
            else None
        return out


def _si(value, unit):
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def efficiency_line(f):
    """The text report's header line: "412 TFLOP/s achieved (41.6 % MFU, H100 SXM bf16);
    1.9 M tokens/s" (MFU "unknown" where the peak is)."""
    parts = []
    if f["tflops_achieved"] is not None and f["flops_per_step"] > 0:
        achieved = _si(f["tflops_achieved"] * 1e12, "FLOP/s")
        if f["mfu"] is not None:
            mfu = f"{100 * f['mfu']:.1f} % MFU, {f['peak_device']} {f['compute_dtype']}"
        else:
            mfu = f"MFU unknown: no peak for {f['peak_device'] or 'this device'} " \
                  f"{f['compute_dtype']} (give peak_flops=)"
        parts.append(f"{achieved} achieved ({mfu}); {_si(f['flops_per_step'], 'FLOP')}/step")
    if f["tokens_per_s"]:
        parts.append(f"{_si(f['tokens_per_s'], 'tokens/s')}")
    return "; ".join(parts)


def _num(x):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return repr(float(x))  # exact: the JSON and the per-phase block read it back


def _notes(f):
    notes = {
        "flops_forward": _num(f["flops_forward"]), "flops_backward": _num(f["flops_backward"]),
        "flops_optimizer": _num(f["flops_optimizer"]),
        "flops_per_step": _num(f["flops_per_step"]), "flops_source": f["source"],
        "tflops_achieved": _num(f["tflops_achieved"]),
        "tflops_forward": _num(f["tflops_forward"]),
        "tflops_backward": _num(f["tflops_backward"]),
        "tflops_optimizer": _num(f["tflops_optimizer"]), "mfu": _num(f["mfu"]),
        "mfu_forward": _num(f["mfu_forward"]), "mfu_backward": _num(f["mfu_backward"]),
        "peak_flops": _num(f["peak_flops"]), "peak_device": f["peak_device"],
        "compute_dtype": f["compute_dtype"], "tokens_per_s": _num(f["tokens_per_s"]),
        "batches_per_s": _num(f["batches_per_s"]), "items_source": f["items_source"],
        "flops_counted_steps": ",".join(str(s) for s in f["counted_steps"]) or None,
        "flops_uncounted": ", ".join(f"{k} x{v}" for k, v in f["uncounted"].items()) or None,
        "flops_compiled": "compiled regions ran: their FLOPs may be missing"
        if f["compiled"] else None,
        "efficiency": efficiency_line(f) or None,
    }
    return {k: (v[:511] if isinstance(v, str) else v) for k, v in notes.items() if v is not None}


def attach(profiler, flops):
    """Profiler(flops=...): True, or a dict of watch()'s options; a Watch the profiler closes
    (Watch.closing). Anything else is refused, naming what was given."""
    if flops is True:
        options = {}
    elif isinstance(flops, dict):
        unknown = set(flops) - {"flops_per_batch", "length_fn", "peak_flops"}
        if unknown:
            raise ValueError(f"Profiler: flops has no option {', '.join(sorted(unknown))} "
                             "(flops_per_batch, length_fn, peak_flops)")
        options = flops
    else:
        raise ValueError("Profiler: flops must be True, False, None or a dict of options "
                         f"(flops_per_batch, length_fn, peak_flops), not {flops!r}")
    return Watch(profiler, **options)


def log_rates(watch, last, seconds, prefix="stepwatch/"):
    """What a front end logs for the training steps since its last log: prefix + "tflops",
    "mfu" (where the peak is known) and "tokens_per_sec", from the Watch's running totals
    against last, the (FLOPs, tokens) at that log, over seconds of training. Returns (the
    figures, the new mark); no figures when nothing was counted meanwhile."""
    flops, tokens = watch.running()
    mark = (flops, tokens)
    if seconds <= 0 or flops <= last[0]:
        return {}, mark
    rate = (flops - last[0]) / seconds
    out = {prefix + "tflops": rate / 1e12}
    peak = watch.peak()[1]
    if peak:
        out[prefix + "mfu"] = rate / peak
    if tokens > last[1]:
        out[prefix + "tokens_per_sec"] = (tokens - last[1]) / seconds
    return out, mark


def watch(profiler=None, **kwargs):
    """A Watch on profiler (the default one when None); close() it to write the figures."""
    import stepwatch
    return Watch(profiler if profiler is not None else stepwatch.profiler(), **kwargs)
