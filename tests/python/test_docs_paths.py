"""What the docs name works after a bare `import stepwatch` (issue 38): every attribute path
`stepwatch.X.Y` in README.md, python/README.md and docs/*.md resolves, in a fresh interpreter
that ran nothing but `import stepwatch`, as a new user's script does. An adapter whose
framework is not installed here is skipped by name; anything else that does not resolve
fails (the README's `stepwatch.transformers.Callback()` did, with the adapter missing from
the package's list). Also: the lists the C library keeps (report formats, categories) and
the copies a type checker needs (the .pyi Literals) agree."""
import glob
import json
import os
import re
import subprocess
import sys

import stepwatch

SOURCE = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
DOCS = [os.path.join(SOURCE, "README.md"), os.path.join(SOURCE, "python", "README.md")]
DOCS += sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))

# `stepwatch.` then names; not inside a path or a longer word (python/stepwatch/torch.py).
PATH_RE = re.compile(r"(?<![\w/.-])stepwatch(?:\.[A-Za-z_]\w*)+")
# The C SDK's files, named in the same docs: the header and the pkg-config file.
FILES = {"stepwatch.h", "stepwatch.pc"}

RESOLVE = r"""
import importlib, json, sys
import stepwatch
out = {}
for path in json.loads(sys.argv[1]):
    obj, parts = stepwatch, path.split(".")[1:]
    try:
        for part in parts:
            obj = getattr(obj, part)
        out[path] = "ok"
    except ModuleNotFoundError as exc:  # the adapter's framework (never stepwatch's own)
        out[path] = ("missing framework " + str(exc.name)
                     if exc.name and not exc.name.startswith("stepwatch") else repr(exc))
    except Exception as exc:
        out[path] = repr(exc)
print(json.dumps(out))
"""


def documented_paths():
    found = {}
    for doc in DOCS:
        with open(doc, encoding="utf-8") as f:
            for m in PATH_RE.finditer(f.read()):
                if m.group(0) not in FILES:
                    found.setdefault(m.group(0), os.path.relpath(doc, SOURCE))
    return found


def test_every_documented_path_resolves_after_a_bare_import():
    paths = documented_paths()
    # The walk reaches what the issue names, and the adapters of every framework.
    for must in ("stepwatch.transformers.Callback", "stepwatch.torch.instrument",
                 "stepwatch.lightning.Profiler", "stepwatch.ignite.BasicTimeProfiler"):
        assert must in paths, must
    run = subprocess.run([sys.executable, "-c", RESOLVE, json.dumps(sorted(paths))],
                         capture_output=True, text=True, timeout=600, cwd=os.path.dirname(
                             os.path.dirname(stepwatch.__file__)))
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout.splitlines()[-1])
    failed = {p: f"{r} (named in {paths[p]})" for p, r in results.items()
              if r != "ok" and not r.startswith("missing framework")}
    assert not failed, failed
    resolved = [p for p, r in results.items() if r == "ok"]
    assert "stepwatch.transformers.Callback" in resolved  # transformers is installed here
    assert len(resolved) >= 40, sorted(results.items())


def test_adapters_are_the_package_modules():
    """The lazy attribute list is the package folder itself: a new adapter file is reachable
    as stepwatch.<name> with nothing else to edit."""
    folder = os.path.dirname(stepwatch.__file__)
    modules = {os.path.splitext(f)[0] for f in os.listdir(folder)
               if f.endswith(".py") and not f.startswith("_")}
    assert stepwatch._ADAPTERS == modules
    assert {"torch", "lightning", "ignite", "fastai", "thunder", "transformers"} <= modules


def pyi_literal(name):
    """The names of a Literal alias of _stepwatch.pyi, read from its text."""
    path = os.path.join(os.path.dirname(stepwatch.__file__), "_stepwatch.pyi")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(rf"^{name} = Literal\[(.*?)\]", text, re.M | re.S)
    assert m, name
    return set(re.findall(r'"([^"]+)"', m.group(1)))


def test_the_stubs_literals_are_the_libraries_lists():
    assert pyi_literal("_Format") == set(stepwatch.FORMATS) | {"md"}
    assert pyi_literal("_Category") == set(stepwatch.CATEGORIES)
    assert stepwatch.FORMATS[0] == "table" and "json" in stepwatch.FORMATS
    for fmt in stepwatch.FORMATS:  # each name the C library gives, it also parses
        stepwatch.Profiler().report(fmt)
