"""python -m stepwatch COMMAND ... — the stepwatch command, from Python.

`report`, `export`, `html`, `compare`, `diagnose`, `merge` (and `--help`, `--version`) are
the C command's: this module finds the `stepwatch` executable that the same installation put
beside the interpreter (or on PATH) and runs it in this process's place, so options, output
and exit codes are the C command's own. `run -- python train.py` is the Python twin of the C
command's `run`: stepwatch.autorun in this process, with autorun's options (--format,
--output, --run-file, --warmup, --timeline, --on-full, --ring-capacity, --live, --no-live);
another program after `--` goes to the C command."""
import os
import shutil
import sys
import sysconfig

from . import __version__, autorun

USAGE = "usage: python -m stepwatch COMMAND [ARGS...]   (python -m stepwatch --help)\n"


def find_command():
    """The `stepwatch` executable of this installation, or None."""
    seen = set()
    dirs = [os.path.dirname(sys.executable)]
    for scheme in (None, f"{os.name}_user"):
        try:
            dirs.append(sysconfig.get_path("scripts", scheme) if scheme
                        else sysconfig.get_path("scripts"))
        except KeyError:
            pass
    for d in dirs:
        path = os.path.join(d, "stepwatch")
        if d and path not in seen and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
        seen.add(path)
    found = shutil.which("stepwatch")
    return found


def run_python(argv):
    """`run` for a Python command without the C command: stepwatch.autorun in this process."""
    if "--" not in argv:
        sys.stderr.write("usage: python -m stepwatch run [autorun options] -- python script.py\n")
        return 2
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    if not command or not os.path.basename(command[0]).startswith("python"):
        sys.stderr.write("stepwatch run: the stepwatch command runs other programs; it is "
                         "not installed here\n")
        return 2
    rest = command[1:]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return autorun.main(options + ["-m", rest[1]] + rest[2:])
    return autorun.main(options + rest)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"] and "--" in argv:
        program = argv[argv.index("--") + 1:][:1]
        if program and os.path.basename(program[0]).startswith("python"):
            return run_python(argv[1:])
    command = find_command()
    if command is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(command, [command] + argv)
    if argv[:1] == ["run"]:
        return run_python(argv[1:])
    sys.stderr.write(f"stepwatch {__version__}: the stepwatch command is not installed beside "
                     f"{sys.executable} nor on PATH (pip install stepwatch puts it there)\n")
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
