"""python -m stepwatch run [options] -- python script.py args...

The Python twin of the C command's `stepwatch run`: for a Python command it behaves as
`python -m stepwatch.autorun [options] script.py args...` (options as autorun's)."""
import os
import sys

from . import autorun

USAGE = "usage: python -m stepwatch run [autorun options] -- python script.py args...\n"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "run":
        sys.stderr.write(USAGE)
        return 2
    argv = argv[1:]
    if "--" not in argv:
        sys.stderr.write(USAGE)
        return 2
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    if not command or not os.path.basename(command[0]).startswith("python"):
        sys.stderr.write("stepwatch run: this entry point runs Python commands; use the "
                         "`stepwatch` command for others\n" + USAGE)
        return 2
    rest = command[1:]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return autorun.main(options + ["-m", rest[1]] + rest[2:])
    return autorun.main(options + rest)


if __name__ == "__main__":
    sys.exit(main())
