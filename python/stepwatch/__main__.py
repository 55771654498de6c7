"""python -m stepwatch COMMAND ... — the stepwatch command, from Python.

Every command, `run` included, is the C command's: this module finds the `stepwatch`
executable that the same installation put beside the interpreter (or on PATH) and runs it in
this process's place, so options, output, run files and exit codes are the C command's own.
A bare `python` (or `python3`, `python3.X`) after `run --` means this interpreter, as does
`run -m MODULE` / `run -c CODE`: `python -m stepwatch run -- python train.py` runs the
script with the Python that ran stepwatch, under `stepwatch run`.

Without the C command (a build without it), `run` is done here the same way: stepwatch.autorun
in this process, the run file defaulting to stepwatch-{rank}.db, and the run files named at
exit; the other commands need the executable."""
import glob
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time

from . import __version__, autorun

USAGE = "usage: python -m stepwatch COMMAND [ARGS...]   (python -m stepwatch --help)\n"
_PYTHON = re.compile(r"python[0-9.]*")


def find_command():
    """The `stepwatch` executable of this installation, or None."""
    seen = set()
    # `pip install --target DIR` puts the package in DIR/stepwatch and the command in DIR/bin:
    # that installation's own command comes first (elsewhere the folder does not exist).
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = [os.path.join(package_root, "bin"), os.path.dirname(sys.executable)]
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


def this_python(argv):
    """`run` arguments with this interpreter for a bare python name after `--`, and for
    `-m MODULE` / `-c CODE` (the C command would take python3 from PATH)."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        if cut + 1 < len(argv) and _PYTHON.fullmatch(argv[cut + 1]):
            argv[cut + 1] = sys.executable
        return argv
    for i, arg in enumerate(argv):
        if arg in ("-m", "-c"):
            return argv[:i] + ["--", sys.executable] + argv[i:]
    return argv


def run_here(argv):
    """`run` without the C command: stepwatch.autorun in this process, as `stepwatch run`
    does it (docs/cli.md): the run file, the environment, the run files named at exit."""
    if "--" not in argv:
        sys.stderr.write("usage: python -m stepwatch run [options] -- python script.py\n")
        return 2
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    if not command or not _PYTHON.fullmatch(os.path.basename(command[0])):
        sys.stderr.write("stepwatch run: the stepwatch command runs other programs; it is "
                         "not installed here\n")
        return 2
    pattern = "stepwatch-{rank}.db"
    while "--run-file" in options[:-1]:  # the C command's run file, through the environment
        at = options.index("--run-file")
        pattern = options[at + 1]
        del options[at:at + 2]
    options = ["--format" if o == "-f" else o for o in options]  # -f is --format, as in C
    pattern = os.path.abspath(pattern)
    os.environ["STEPWATCH_RUN_FILE"] = pattern
    os.environ.pop("STEPWATCH_RUN_FILE_OWNER", None)
    fd, listed = tempfile.mkstemp(prefix="stepwatch-run-files-")
    os.close(fd)
    os.environ["STEPWATCH_RUN_FILE_LIST"] = listed
    started = time.time() - 1  # file times come from a coarser clock
    try:
        return autorun.main(options + command[1:])  # script.py, -m MODULE or -c CODE
    finally:
        report_run_files(pattern, listed, started)
        os.unlink(listed)


def report_run_files(pattern, listed, started):
    """The line `stepwatch run` prints at exit: the run files of the pattern and those the
    program's profilers named themselves (STEPWATCH_RUN_FILE_LIST), written since started."""
    number = re.escape(pattern).replace(r"\{rank\}", "[0-9]+").replace(r"\{pid\}", "[0-9]+")
    found = [p for p in sorted(glob.glob(glob.escape(pattern).replace("{rank}", "*")
                                         .replace("{pid}", "*")))
             if re.fullmatch(number, p)]
    with open(listed) as f:
        found += [line.rstrip("\n") for line in f if line.strip()]
    shown = []
    for path in found:
        if (path not in shown and os.path.isfile(path)
                and os.stat(path).st_mtime >= started):
            shown.append(path)
    if not shown:
        sys.stderr.write(f"stepwatch: no run file was written ({pattern})\n")
    elif len(shown) == 1:
        sys.stderr.write(f"stepwatch: run file: {shown[0]}\n")
    else:
        sys.stderr.write(f"stepwatch: run file: {', '.join(shown)} ({len(shown)} files: "
                         "'stepwatch merge' joins ranks)\n")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        argv = ["run"] + this_python(argv[1:])
    command = find_command()
    if command is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(command, [command] + argv)
    if argv[:1] == ["run"]:
        return run_here(argv[1:])
    sys.stderr.write(f"stepwatch {__version__}: the stepwatch command is not installed beside "
                     f"{sys.executable} nor on PATH (pip install stepwatch puts it there)\n")
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
