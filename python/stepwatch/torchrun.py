"""python -m stepwatch.torchrun [torchrun options] script.py args...   (or -m module args...)

torchrun with every worker under stepwatch: each worker runs ``python -m stepwatch.autorun
script.py args...`` instead of ``python script.py args...``, so each rank is instrumented and
writes its run file, and rank 0 prints the report and the cross-rank view. The C command
``stepwatch run -- torchrun ...`` (and ``stepwatch run -- python -m torch.distributed.run
...``) lands here. torchrun's own options are read by torchrun's own parser; the rest of the
command line is passed on as written.
"""
import sys
import warnings


def worker_argv(argv):
    """torchrun's argv with the training script run through stepwatch.autorun, or argv as it
    is when the workers are not Python scripts (--no-python, --run-path)."""
    from torch.distributed import run
    args = run.get_args_parser().parse_args(argv)
    if args.no_python or args.run_path:
        warnings.warn("stepwatch: torchrun --no-python/--run-path workers are not instrumented",
                      RuntimeWarning, stacklevel=2)
        return list(argv)
    script = len(argv) - len(args.training_script_args) - 1
    options = [a for a in argv[:script] if a not in ("-m", "--module")]
    return (options + ["-m", "stepwatch.autorun"] + (["-m"] if args.module else []) +
            argv[script:])


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    from torch.distributed import run
    run.main(worker_argv(argv))


if __name__ == "__main__":
    main()
