"""python -m stepwatch.autorun [options] script.py args...   (or -m module args...)

Runs an unmodified PyTorch script with stepwatch.torch.instrument() on and prints the report
when it ends, also when it fails or is interrupted. The report goes to stderr (the script's
stdout stays its own) unless --output is given. The C command `stepwatch run -- python
train.py` execs this; `python -m stepwatch run -- python train.py` does the same.

Options (each also read from the environment, for the C command to pass on):
  --format F        report format (STEPWATCH_FORMAT, default table)
  --output PATH     write the report to PATH (STEPWATCH_OUTPUT)
  --run-file PATH   also write a run file; "{rank}" expands (STEPWATCH_RUN_FILE)
  --warmup N        warm-up steps kept out of the statistics (STEPWATCH_WARMUP, default 0)
  --timeline        keep every span in the run file (STEPWATCH_TIMELINE=1)
  --on-full P       drop (default) or block when the run file's writer falls behind
                    (STEPWATCH_ON_FULL)
  --ring-capacity N events buffered per thread for the run file (STEPWATCH_RING_CAPACITY)
  --functions A,B   profile the functions called inside these actions; their cProfile
                    tables follow the report (STEPWATCH_FUNCTIONS)
  --builtins        with --functions, record C builtins too (STEPWATCH_FUNCTION_BUILTINS=1)
  --live, --no-live the live status line on stderr: always / never (STEPWATCH_LIVE=1/0;
                    by default when stderr is a terminal)
  --device-stats [S]  sample CPU, memory, GPUs and torch's CUDA allocator every S seconds
                    (default 0.5; STEPWATCH_DEVICE_STATS, in ms)
  --device-time     the GPU time of each phase from CUDA events (STEPWATCH_DEVICE_TIME=1)
"""
import argparse
import os
import runpy
import sys
import warnings

import stepwatch


def _device_stats_env(value):
    """STEPWATCH_DEVICE_STATS: "1" is on at the default interval, more is the interval in ms."""
    if not value.isdigit() or int(value) == 0:
        return None
    return 0.5 if value == "1" else int(value) / 1000


def _parser():
    env = os.environ.get
    ap = argparse.ArgumentParser(prog="python -m stepwatch.autorun",
                                 description="Run a PyTorch script under stepwatch.")
    ap.add_argument("--format", default=env("STEPWATCH_FORMAT", "table"),
                    choices=list(stepwatch.FORMATS) + ["md"])
    ap.add_argument("--output", default=env("STEPWATCH_OUTPUT"))
    # None: the core takes STEPWATCH_RUN_FILE itself, so that this process owns it and its
    # children (DataLoader workers, subprocesses) leave it alone (docs/reliability.md).
    ap.add_argument("--run-file", default=None)
    ap.add_argument("--warmup", type=int, default=int(env("STEPWATCH_WARMUP", "0")))
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
    ap.add_argument("-m", dest="module", help="run a module, like python -m")
    ap.add_argument("target", nargs=argparse.REMAINDER, help="script.py args...")
    return ap


def _write_report(prof, fmt, output):
    text = prof.report(fmt)
    if prof.function_actions():
        text += "\n" + prof.function_report()
    if output:
        stepwatch.write_output(output, text)  # all or nothing: an old report stays whole
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.module:
        name, rest = args.module, args.target
    elif args.target:
        name, rest = args.target[0], args.target[1:]
    else:
        _parser().error("nothing to run: give script.py or -m module")
    if args.warmup < 0:
        _parser().error("--warmup must be >= 0")
    if not 0 <= args.ring_capacity <= stepwatch.MAX_RING_CAPACITY:
        _parser().error(f"--ring-capacity must be 0 (the default) to "
                        f"{stepwatch.MAX_RING_CAPACITY}")
    functions = [a.strip() for a in args.functions.split(",") if a.strip()]
    # torch.cuda.Event times the phases here, not the C runtime the variable asks the core for
    os.environ.pop("STEPWATCH_DEVICE_TIME", None)
    prof = stepwatch.Profiler(name=os.path.basename(name), warmup_steps=args.warmup,
                              run_file=args.run_file, timeline=args.timeline,
                              on_full=args.on_full, ring_capacity=args.ring_capacity,
                              functions=functions, builtins=args.builtins, live=args.live,
                              device_stats=args.device_stats or False,
                              device_time=args.device_time)
    stepwatch.set_profiler(prof)
    try:
        import stepwatch.torch as swtorch
        swtorch.instrument(prof)
    except ImportError as exc:  # no torch: still run the script, say why nothing is timed
        swtorch = None
        warnings.warn(f"stepwatch: torch not importable ({exc}); nothing is instrumented",
                      RuntimeWarning)
    sys.argv = [name] + list(rest)
    code = 0
    try:
        if args.module:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(name)))
            runpy.run_path(name, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    finally:
        # also on an exception or Ctrl-C: the report is what the user came for
        if swtorch is not None:
            swtorch.uninstrument()
        _write_report(prof, args.format, args.output)
        prof.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
