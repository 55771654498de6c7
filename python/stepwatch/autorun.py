"""python -m stepwatch.autorun [options] script.py args...   (or -m module, -c code)

Runs an unmodified PyTorch script with stepwatch.torch.instrument() on and prints the report
when it ends, also when it fails or is interrupted. The report goes to stderr (the script's
stdout stays its own) unless --output is given. The C command `stepwatch run -- python
train.py` execs this; `python -m stepwatch run -- python train.py` does the same.

As with python itself, what follows the script (or -m module, -c code) is the program's:
    python -m stepwatch.autorun --warmup 2 train.py --lr 0.1
    python -m stepwatch.autorun -m mypkg.train --epochs 3
    python -m stepwatch.autorun -c "import train; train.main()" extra args

Options (each also read from the environment, for the C command to pass on):
  --format F        report format (STEPWATCH_FORMAT, default table)
  --output PATH     write the report to PATH (STEPWATCH_OUTPUT)
  --run-file PATH   also write a run file; "{rank}" expands (STEPWATCH_RUN_FILE)
  --warmup N        warm-up steps kept out of the statistics (STEPWATCH_WARMUP, default 0)
  --forward M       how the forward is timed: patch (default) or hooks (STEPWATCH_FORWARD)
  --timeline        keep every span in the run file (STEPWATCH_TIMELINE=1)
  --on-full P       drop (default) or block when the run file's writer falls behind
                    (STEPWATCH_ON_FULL)
  --ring-capacity N events buffered per thread for the run file (STEPWATCH_RING_CAPACITY)
  --functions A,B   profile the functions called inside these actions; their cProfile
                    tables follow the report (STEPWATCH_FUNCTIONS)
  --builtins        with --functions, record C builtins too (STEPWATCH_FUNCTION_BUILTINS=1)
  --live, --no-live the live status line on stderr: always / never (STEPWATCH_LIVE=1/0;
                    by default when stderr is a terminal)
  --device-stats[=S]  sample CPU, memory, GPUs and torch's CUDA allocator every S seconds
                    (default 0.5; STEPWATCH_DEVICE_STATS, in ms)
  --device-time     the GPU time of each phase from CUDA events (STEPWATCH_DEVICE_TIME=1)
  --no-step-memory  no memory per step: RSS, torch's CUDA allocator (STEPWATCH_STEP_MEMORY=0)
  --flops           count one training step's FLOPs per input shape (stepwatch.flops): achieved
                    TFLOP/s, MFU on a known GPU, tokens/s in the report's header line
                    (STEPWATCH_FLOPS=1); without --warmup, the counted first step is warm-up
  --peak-flops F    the device's peak FLOP/s for MFU where the table has none (a CPU)
                    (STEPWATCH_PEAK_FLOPS)
  --modules [K]     each nn.Module's forward and backward time and memory, every K-th step
                    (default 10; STEPWATCH_MODULES=on or K)

Under torch.distributed (torchrun) every rank keeps its run file and rank 0 alone prints,
its report followed by the cross-rank view (stepwatch.distributed; STEPWATCH_AGGREGATE_EVERY,
STEPWATCH_AGGREGATE_TIMEOUT). `-m torch.distributed.run ARGS` instruments torchrun's workers
(stepwatch.torchrun).
"""
import argparse
import os
import runpy
import signal
import sys
import warnings

import stepwatch
from stepwatch import _lightning_launch, _oom
from stepwatch._stepwatch import _watch_profilers

# autorun's options that take a value (the rest are flags); what follows them is the program
_VALUED = ("--format", "--output", "--run-file", "--warmup", "--forward", "--on-full",
           "--ring-capacity", "--functions", "--peak-flops", _lightning_launch.RANK_OPTION)


def _device_stats_env(value):
    """STEPWATCH_DEVICE_STATS: "1" is on at the default interval, more is the interval in ms."""
    if not value.isdigit() or int(value) == 0:
        return None
    return 0.5 if value == "1" else int(value) / 1000


def _parser():
    env = os.environ.get
    ap = argparse.ArgumentParser(
        prog="python -m stepwatch.autorun",
        usage="%(prog)s [options] (script.py | -m module | -c code) [args...]",
        description="Run a PyTorch script under stepwatch.")
    ap.add_argument("--format", default=env("STEPWATCH_FORMAT", "table"),
                    choices=list(stepwatch.FORMATS) + ["md"])
    ap.add_argument("--output", default=env("STEPWATCH_OUTPUT"))
    # None: the core takes STEPWATCH_RUN_FILE itself, so that this process owns it and its
    # children (DataLoader workers, subprocesses) leave it alone (docs/reliability.md).
    ap.add_argument("--run-file", default=None)
    ap.add_argument("--warmup", type=int, default=int(env("STEPWATCH_WARMUP", "0")))
    ap.add_argument("--forward", default=env("STEPWATCH_FORWARD", "patch"),
                    choices=["patch", "hooks"])
    ap.add_argument("--timeline", action="store_true",
                    default=env("STEPWATCH_TIMELINE", "") not in ("", "0"))
    ap.add_argument("--on-full", default=env("STEPWATCH_ON_FULL", "drop"),
                    choices=["drop", "block"])
    ap.add_argument("--ring-capacity", type=int, default=int(env("STEPWATCH_RING_CAPACITY", "0")))
    ap.add_argument("--functions", default=env("STEPWATCH_FUNCTIONS", ""))
    ap.add_argument("--builtins", action="store_true",
                    default=env("STEPWATCH_FUNCTION_BUILTINS", "") not in ("", "0"))
    ap.add_argument("--live", dest="live", action="store_const", const=True, default=None)
    ap.add_argument("--no-live", dest="live", action="store_const", const=False)
    ap.add_argument("--device-stats", type=float, nargs="?", const=0.5,
                    default=_device_stats_env(env("STEPWATCH_DEVICE_STATS", "")))
    ap.add_argument("--device-time", action="store_true",
                    default=env("STEPWATCH_DEVICE_TIME", "") not in ("", "0"))
    ap.add_argument("--no-step-memory", dest="step_memory", action="store_false",
                    default=env("STEPWATCH_STEP_MEMORY", "") != "0")
    ap.add_argument("--flops", action="store_true",
                    default=env("STEPWATCH_FLOPS", "0") not in ("", "0"))
    ap.add_argument("--peak-flops", type=float,
                    default=float(env("STEPWATCH_PEAK_FLOPS")) if env("STEPWATCH_PEAK_FLOPS")
                    else None)
    ap.add_argument("--modules", type=_modules_every, nargs="?", const=True,
                    default=_modules_every(env("STEPWATCH_MODULES", "0")))
    # a rank Lightning's launcher started (stepwatch._lightning_launch): its global rank
    ap.add_argument(_lightning_launch.RANK_OPTION, type=int, default=None, help=argparse.SUPPRESS)
    return ap


def _as_lightning_child(args):
    """A rank Lightning started again through autorun: its rank and world size (Lightning
    sets neither RANK nor anything the core reads but WORLD_SIZE) and its own run file. The
    environment's mark says the parent owns the run file: with {rank} or {pid} in the path
    this rank takes a file of its own; without, the one path is the parent's, and this rank
    keeps no file (its figures still reach rank 0 in the end-of-run round)."""
    path = args.run_file or os.environ.get("STEPWATCH_RUN_FILE", "")
    if "{rank}" in path or "{pid}" in path:
        os.environ.pop("STEPWATCH_RUN_FILE_OWNER", None)
    else:
        args.run_file = None
    world = os.environ.get("WORLD_SIZE", "")
    return {"rank": args.lightning_rank, "world_size": int(world) if world.isdigit() else 0}


def _modules_every(text):
    """STEPWATCH_MODULES / --modules: "on" (every 10th step), a step interval, "0" off."""
    if text is True or text in ("on", "1"):
        return True if text != "1" else 1
    if text in ("", "0", "off"):
        return False
    try:
        every = int(text)
    except ValueError:
        every = 0
    if every < 1:
        raise argparse.ArgumentTypeError(f"--modules takes a step interval >= 1, not {text!r}")
    return every


def _split(argv):
    """autorun's options, then what to run: ("script", path) | ("-m", module) |
    ("-c", code) | None, then the program's arguments."""
    for i, arg in enumerate(argv):
        if arg in ("-m", "-c"):
            if i + 1 == len(argv):
                return argv[:i], None, []
            return argv[:i], (arg, argv[i + 1]), argv[i + 2:]
        if arg == "--":
            rest = argv[i + 1:]
            return argv[:i], ("script", rest[0]) if rest else None, rest[1:]
        if not arg.startswith("-"):
            if i > 0 and argv[i - 1] in _VALUED:
                continue  # the value of an option
            return argv[:i], ("script", arg), argv[i + 1:]
    return argv, None, []


def _without_rank(options):
    """autorun's options less the rank a Lightning child was given (its children get theirs)."""
    out, skip = [], False
    for arg in options:
        if skip or arg == _lightning_launch.RANK_OPTION:
            skip = not skip
            continue
        out.append(arg)
    return out


def _write_report(prof, fmt, output, view=None, run_file=None):
    if prof.closed:  # the program closed its own profiler: its run file has the run
        if run_file is None or not os.path.isfile(run_file):
            sys.stderr.write("stepwatch: the program closed its profiler, which wrote no run "
                             "file: no report\n")
            return
        text = stepwatch.load(run_file).report(fmt, full_names=bool(output))
    else:
        text = prof.report(fmt, full_names=bool(output))  # a file keeps every name whole
        if prof.function_actions():
            text += "\n" + prof.function_report()
    if view is not None:
        text += "\n" + view.report_after(fmt)
    if output:
        stepwatch.write_output(output, text)  # all or nothing: an old report stays whole
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


def _run(target, rest):
    """Run the program as python would, as __main__."""
    kind, what = target
    if kind == "-m":
        sys.argv = [what] + rest  # runpy puts the module's path in argv[0]
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    elif kind == "-c":
        sys.argv = ["-c"] + rest
        sys.path.insert(0, "")
        main = {"__name__": "__main__", "__builtins__": __builtins__, "__doc__": None}
        exec(compile(what, "<string>", "exec"), main)
    else:
        sys.argv = [what] + rest
        sys.path.insert(0, os.path.dirname(os.path.abspath(what)))
        # An absolute __file__ and traceback paths, as python itself gives a script.
        runpy.run_path(os.path.abspath(what), run_name="__main__")


class _Run:
    """What the run records: autorun's profiler, until the program makes a Profiler of its
    own before autorun's has seen a step. Then the program's profiler is the run's: it takes
    the run file (autorun's, which holds no step, is removed), the instrumentation and the
    cross-rank watch move to it, and its report is the one printed at exit. A profiler the
    program makes after steps were recorded is the program's own business."""

    def __init__(self, prof, forward, flops=None):
        self.prof = prof
        self.flops = flops
        self.run_file = prof.run_file  # read now: a closed profiler no longer tells
        self.forward = forward
        self.swtorch = None
        self.swdist = None
        self.ranks = None

    def instrument(self):
        try:
            import stepwatch.torch as swtorch
            swtorch.instrument(self.prof, forward=self.forward, flops=self.flops)
            import stepwatch.distributed as swdist
            self.ranks = swdist.watch(self.prof, quiet=True)
            self.swtorch, self.swdist = swtorch, swdist
        except ImportError as exc:  # no torch: still run the script, say why nothing is timed
            warnings.warn(f"stepwatch: torch not importable ({exc}); nothing is instrumented",
                          RuntimeWarning)

    def on_new_profiler(self, made):
        """stepwatch._stepwatch's hook: called with None before the program makes a
        Profiler, then with the new one."""
        if made is None:
            if self.prof.step_count > 0:  # autorun's has the run: it keeps it
                _watch_profilers(None)
                return
            if self.swtorch is not None:
                self.swtorch.uninstrument()
            path = self.prof.run_file if self.prof.run_file_error is None else None
            self.prof.close()
            if path is not None and os.path.isfile(path):
                os.unlink(path)  # no step in it: the program's profiler writes the run
            os.environ.pop("STEPWATCH_RUN_FILE_OWNER", None)
            return
        _watch_profilers(None)
        # A program's profiler with a run file of its own leaves the environment's alone,
        # and so must the profilers after it and the children.
        os.environ.setdefault("STEPWATCH_RUN_FILE_OWNER", str(os.getpid()))
        self.prof = made
        self.run_file = made.run_file if made.run_file_error is None else None
        stepwatch.set_profiler(made)
        self.instrument()

    def finish(self, fmt, output):
        _watch_profilers(None)
        view = None
        if self.ranks is not None:
            view = self.swdist.finish(self.prof)  # every rank: the end-of-run round
        if self.swtorch is not None:
            self.swtorch.uninstrument(quiet=True)  # the end: whatever wraps ours stays
        # Under torch.distributed rank 0 speaks for every rank; each keeps its run file.
        ranks = self.ranks
        if ranks is None or not ranks.world_size or ranks.world_size < 2 or ranks.rank == 0:
            _write_report(self.prof, fmt, output, view, self.run_file)
        self.prof.close()


def _users_traceback(exc):
    """exc's traceback from the program's first frame on: autorun's and runpy's frames,
    which every traceback under `stepwatch run` would start with, left out."""
    tb = exc.__traceback__
    ours = (os.path.abspath(__file__), )
    while tb is not None and tb.tb_next is not None:
        name = tb.tb_frame.f_code.co_filename
        if name not in ours and "runpy" not in os.path.basename(name):
            break
        tb = tb.tb_next
    return tb


def main(argv=None):
    options, target, rest = _split(list(sys.argv[1:] if argv is None else argv))
    ap = _parser()
    args = ap.parse_args(options)
    if target is None:
        ap.error("nothing to run: give script.py, -m module or -c code")
    if target == ("-m", "torch.distributed.run"):  # torchrun: instrument its workers instead
        from stepwatch.torchrun import main as torchrun
        return torchrun(rest)
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if not 0 <= args.ring_capacity <= stepwatch.MAX_RING_CAPACITY:
        ap.error(f"--ring-capacity must be 0 (the default) to {stepwatch.MAX_RING_CAPACITY}")
    if args.peak_flops is not None and not args.peak_flops > 0:
        ap.error("--peak-flops must be a number of FLOP/s > 0")
    flops = None
    if args.flops or args.peak_flops is not None:
        flops = {"peak_flops": args.peak_flops} if args.peak_flops is not None else True
        if args.warmup == 0:
            args.warmup = 1  # the counted step runs slower: keep it out of the statistics
    name = "-c" if target[0] == "-c" else os.path.basename(target[1])
    functions = [a.strip() for a in args.functions.split(",") if a.strip()]
    # torch.cuda.Event times the phases here, not the C runtime the variable asks the core for
    os.environ.pop("STEPWATCH_DEVICE_TIME", None)
    ranks = {} if args.lightning_rank is None else _as_lightning_child(args)
    prof = stepwatch.Profiler(name=name, warmup_steps=args.warmup, run_file=args.run_file,
                              timeline=args.timeline, on_full=args.on_full,
                              ring_capacity=args.ring_capacity, functions=functions,
                              builtins=args.builtins, live=args.live,
                              device_stats=args.device_stats or False,
                              device_time=args.device_time, memory=args.step_memory,
                              modules=args.modules, **ranks)
    stepwatch.set_profiler(prof)
    run = _Run(prof, args.forward, flops)
    run.instrument()
    _watch_profilers(run.on_new_profiler)
    # the ranks Lightning starts by running the script again run under autorun too
    _lightning_launch.follow(_without_rank(options))
    code = 0
    failed = None
    try:
        _run(target, rest)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # noqa: B036 -- printed below, after the report
        failed = exc
        _oom.seen(run.prof, exc)  # an out-of-memory error: where it happened, before the report
    finally:
        _lightning_launch.stop()
        # also on an exception or Ctrl-C: the report is what the user came for
        run.finish(args.format, args.output)
    if failed is None:
        return code
    tb = _users_traceback(failed)
    # The hook prints the exception's own traceback (the one passed only when it has none).
    sys.excepthook(type(failed), failed.with_traceback(tb), tb)
    if isinstance(failed, KeyboardInterrupt):
        # Exit as Python does on Ctrl-C: killed by SIGINT, so that shells and `stepwatch
        # run` see the interrupt.
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return 1


if __name__ == "__main__":
    sys.exit(main())
