#!/usr/bin/env python3
"""layers.py — check the C code against its layer order (src/layers.txt).

    layers.py [--unbuilt DIR]... ROOT BUILD
                              check the source tree ROOT and the objects built under BUILD;
                              --unbuilt: a folder this build does not compile (say, MPI's
                              without MPI), whose files need no object
    layers.py --self-test     the check on small made-up trees: it must catch what it is for

Two graphs are derived and checked:
  calls     from the object files: each object's defined and undefined symbols (nm), so a
            file calls a file when it uses a symbol the other defines. Objects are found
            under BUILD's [<folder>/]CMakeFiles/<target>.dir/ and mapped back to their
            sources (the extension's: python/CMakeFiles/sw_python_objects.dir/_stepwatch/).
  includes  from the sources: every #include "..." resolved to a file of the tree.
It fails on
  - a circle: files that call each other, directly or round a loop (or include each other);
  - an edge from one layer to another that src/layers.txt does not allow (a "public" layer
    may use only sw_ symbols of the others, never sw__, and include only include/);
  - a C file of a layer with no object under BUILD (its calls would go unseen), unless
    its folder is --unbuilt;
  - a C file in no layer, a layer whose path is gone, a circle in the table itself, a
    table line that src/README.md does not quote, or a file its folder's README does not
    name (each layer's folder, src/<layer>/, cli/, python/_stepwatch/, has a README.md that
    lists its files).
Exit status 0 when all holds, 1 with one line per problem otherwise.
"""
import os
import re
import subprocess
import sys
import tempfile

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read_table(path):
    """[(name, path, [deps])] in the table's order."""
    layers = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = "" if line.lstrip().startswith("#") else line.strip()
            if not text:
                continue
            left, arrow, right = text.partition("->")
            words = left.split()
            if not arrow or len(words) != 2:
                raise SystemExit(f"{path}:{number}: expected 'NAME PATH -> LAYERS...', "
                                 f"got {line!r}")
            layers.append((words[0], words[1], right.split()))
    return layers


def table_lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip() for l in f if l.strip() and not l.lstrip().startswith("#")]


class Layers:
    def __init__(self, root, table):
        self.root = root
        self.table = table
        self.deps = {name: set(deps) for name, _, deps in table}

    def layer_of(self, rel):
        """The layer a file (path relative to the root) belongs to; "public" for include/;
        None for a file of no layer."""
        if rel.startswith("include/"):
            return "public"
        best, best_len = None, -1
        for name, path, _ in self.table:
            hit = rel.startswith(path) if path.endswith("/") else rel == path
            if hit and len(path) > best_len:
                best, best_len = name, len(path)
        return best

    def allowed(self, src, dst, symbol=None):
        if src == dst:
            return True
        deps = self.deps[src]
        if dst == "public":
            return True
        if dst in deps:
            return True
        if "public" in deps and symbol is not None:
            return symbol.startswith("sw_") and not symbol.startswith("sw__")
        return False


def c_files(root, top):
    base = os.path.join(root, top)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        for fn in filenames:
            if fn.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(dirpath, fn), root)


def circles(graph):
    """Strongly connected components of two or more nodes (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def objects(root, build):
    """{object path: source path relative to root} for the objects of the tree's sources."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(build):
        for fn in filenames:
            if not fn.endswith(".o"):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, build)
            m = re.match(r"(?:(.*)/)?CMakeFiles/[^/]+\.dir/(.+)\.o$", rel)
            if not m:
                continue
            source = os.path.normpath(os.path.join(m.group(1) or "", m.group(2)))
            if os.path.isfile(os.path.join(root, source)):
                found[path] = source
    return found


def symbols(path):
    """(defined, undefined) global symbols of an object file."""
    nm = os.environ.get("NM", "nm")
    out = subprocess.run([nm, "-P", path], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper():
            defined.add(name)
    return defined, undefined


# Top folders whose C files are no part of any layer.
NOT_LAYERED = {"include", "tests", "bench", "examples", "third_party", "dist"}


def check(root, build, readme=True, unbuilt=()):
    """(problems, summary): the lines to print, and what was checked. unbuilt: folders
    (relative to root, ending in /) this build does not compile."""
    table_path = os.path.join(root, "src", "layers.txt")
    table = read_table(table_path)
    layers = Layers(root, table)
    problems = []
    names = {name for name, _, _ in table}

    # The table itself: known names, existing paths, no circle, quoted by the README.
    for name, path, deps in table:
        if not os.path.exists(os.path.join(root, path)):
            problems.append(f"table: layer {name}'s path {path} does not exist")
        for d in deps:
            if d != "public" and d not in names:
                problems.append(f"table: layer {name} may call '{d}', which is no layer")
    for scc in circles({n: {d for d in layers.deps[n] if d in names} for n in names}):
        problems.append("table: a circle of layers: " + " -> ".join(scc))
    if readme:
        readme_path = os.path.join(root, "src", "README.md")
        with open(readme_path, encoding="utf-8") as f:
            text = f.read()
        for line in table_lines(table_path):
            if line not in text:
                problems.append(f"src/README.md does not quote the table's line {line!r}")

    # Every C file belongs to a layer: those of every top folder but the tests', the
    # benchmarks', the examples' and the public headers (a new folder cannot slip by).
    sources = []
    tops = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))
            and not d.startswith((".", "build")) and d not in NOT_LAYERED]
    for top in sorted(tops):
        for rel in c_files(root, top):
            if layers.layer_of(rel) is None:
                problems.append(f"{rel}: in no layer of src/layers.txt")
            else:
                sources.append(rel)

    # Every folder of a layer (the library's, the command's, the extension's) has a README
    # that names each of its files.
    for name, path, _ in table:
        folder = os.path.join(root, path)
        if not (path.endswith("/") and os.path.isdir(folder)):
            continue
        readme_path = os.path.join(folder, "README.md")
        if not os.path.isfile(readme_path):
            problems.append(f"{path}README.md: missing (each folder's README lists its files)")
            continue
        with open(readme_path, encoding="utf-8") as f:
            text = f.read()
        for fn in sorted(os.listdir(folder)):
            if fn.endswith((".c", ".h")) and fn not in text:
                problems.append(f"{path}README.md: does not name {fn}")

    # Includes.
    include_graph = {}
    for rel in sources:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        src_layer = layers.layer_of(rel)
        for inc in INCLUDE_RE.findall(text):
            target = None
            for base in (os.path.dirname(rel), "src", "include"):
                cand = os.path.normpath(os.path.join(base, inc))
                if os.path.isfile(os.path.join(root, cand)):
                    target = cand
                    break
            if target is None:
                continue  # not a file of the tree (a system header in quotes)
            dst_layer = layers.layer_of(target)
            include_graph.setdefault(rel, set()).add(target)
            if dst_layer is None:
                continue
            if not layers.allowed(src_layer, dst_layer):
                problems.append(f"include {rel} -> {target}: {src_layer} may not include "
                                f"{dst_layer}")
    for scc in circles(include_graph):
        problems.append("include circle: " + " <-> ".join(scc))

    # Calls, from the objects.
    objs = objects(root, build)
    defined_by, uses = {}, {}
    for path, source in objs.items():
        if layers.layer_of(source) is None:
            continue
        defined, undefined = symbols(path)
        for s in defined:
            defined_by.setdefault(s, set()).add(source)
        uses.setdefault(source, set()).update(undefined)
    if not uses:
        problems.append(f"{build}: no object file of the tree's C sources (build it first)")
    compiled = set(objs.values())
    for rel in sources:
        if rel.endswith(".c") and rel not in compiled and not rel.startswith(tuple(unbuilt)):
            problems.append(f"{rel}: no object under the build, so its calls go unchecked "
                            f"(build it, or name its folder with --unbuilt)")
    call_graph, edge_symbols = {}, {}
    for source, undefined in sorted(uses.items()):
        src_layer = layers.layer_of(source)
        for s in sorted(undefined):
            for target in sorted(defined_by.get(s, ())):
                if target == source:
                    continue
                call_graph.setdefault(source, set()).add(target)
                edge_symbols.setdefault((source, target), []).append(s)
                dst_layer = layers.layer_of(target)
                if not layers.allowed(src_layer, dst_layer, s):
                    problems.append(f"call {source} -> {target} ({s}): {src_layer} may not call "
                                    f"{dst_layer}")
    for scc in circles(call_graph):
        members = set(scc)
        ties = [f"{a} -> {b} ({edge_symbols[(a, b)][0]})" for a in scc
                for b in sorted(call_graph.get(a, ())) if b in members]
        problems.append("call circle: " + ", ".join(ties))

    edges = sum(len(v) for v in call_graph.values())
    summary = (f"{len(table)} layers, {len(sources)} C files, "
               f"{sum(len(v) for v in include_graph.values())} includes, "
               f"{len(uses)} objects with {edges} call edges between files")
    if unbuilt:
        summary += " (not built here: " + ", ".join(unbuilt) + ")"
    return problems, summary


# ---- self-test: made-up trees, compiled for real, that the check must refuse --------------

SELF_TABLE = """\
# layer  path       -> may call
app      app/       -> public
top      src/top/   -> core
core     src/core/  ->
"""


def make_tree(base, files, table=SELF_TABLE, readme=None, readme_leaves_out=(),
              own_target=(), not_compiled=()):
    """own_target: files compiled as a target of their own folder's CMakeLists
    (BUILD/<folder>/CMakeFiles/own.dir/<name>.o, as python/ builds the extension's);
    not_compiled: files the build leaves out."""
    root = os.path.join(base, "tree")
    build = os.path.join(base, "build")
    for rel, text in list(files.items()) + [("src/layers.txt", table),
                                            ("include/pub.h", "void sw_pub(void);\n")]:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(root, "src", "README.md"), "w", encoding="utf-8") as f:
        f.write(readme if readme is not None else "\n".join(table_lines(
            os.path.join(root, "src", "layers.txt"))) + "\n")
    folders = {os.path.dirname(rel) for rel in files}
    for folder in folders:  # each folder's README names its files
        names = sorted(os.path.basename(r) for r in files if os.path.dirname(r) == folder)
        with open(os.path.join(root, folder, "README.md"), "w", encoding="utf-8") as f:
            f.write("".join(f"- `{n}`\n" for n in names if n not in readme_leaves_out))
    for rel in files:
        if rel.endswith(".c") and rel not in not_compiled:
            obj = os.path.join(build, "CMakeFiles", "t.dir", rel + ".o")
            if rel in own_target:
                folder, name = rel.split("/", 1)
                obj = os.path.join(build, folder, "CMakeFiles", "own.dir", name + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            cc = os.environ.get("CC", "cc")
            subprocess.run([cc, "-c", "-o", obj, "-I", os.path.join(root, "src"),
                            "-I", os.path.join(root, "include"), os.path.join(root, rel)],
                           check=True)
    return root, build


CLEAN = {
    "src/core/core.c": "void core_fn(void) {}\nvoid sw_pub(void) {}\n",
    "src/core/core.h": "void core_fn(void);\n",
    "src/top/top.c": '#include "core/core.h"\nvoid top_fn(void) { core_fn(); }\n',
    "src/top/top.h": "void top_fn(void);\n",
    "app/main.c": '#include "pub.h"\nint main(void) { sw_pub(); return 0; }\n',
}

CASES = [
    ("a clean tree", {}, {}, []),
    ("an upward call", {
        "src/core/up.c": "void top_fn(void);\nvoid up(void) { top_fn(); }\n"}, {},
     ["call src/core/up.c -> src/top/top.c (top_fn): core may not call top"]),
    ("an upward include", {
        "src/core/inc.c": '#include "top/top.h"\nvoid inc(void) {}\n'}, {},
     ["include src/core/inc.c -> src/top/top.h: core may not include top"]),
    ("two files that call each other", {
        "src/top/a.c": "void b(void);\nvoid a(int n) { if (n) b(); }\n",
        "src/top/b.c": "void a(int);\nvoid b(void) { a(0); }\n"}, {},
     ["call circle: src/top/a.c -> src/top/b.c (b), src/top/b.c -> src/top/a.c (a)"]),
    ("three files round a loop", {
        "src/core/x.c": "void y(void);\nvoid x(void) { y(); }\n",
        "src/core/y.c": "void z(void);\nvoid y(void) { z(); }\n",
        "src/core/z.c": "void x(void);\nvoid z(void) { x(); }\n"}, {},
     ["call circle: src/core/x.c -> src/core/y.c (y), src/core/y.c -> src/core/z.c (z), "
      "src/core/z.c -> src/core/x.c (x)"]),
    ("a public layer using a private function", {
        "app/sneak.c": "void core_fn(void);\nvoid sneak(void) { core_fn(); }\n"}, {},
     ["call app/sneak.c -> src/core/core.c (core_fn): app may not call core"]),
    ("a public layer including a private header", {
        "app/peek.c": '#include "../src/core/core.h"\nvoid peek(void) {}\n'}, {},
     ["include app/peek.c -> src/core/core.h: app may not include core"]),
    ("a file in no layer", {"src/stray/s.c": "void s(void) {}\n"}, {},
     ["src/stray/s.c: in no layer of src/layers.txt"]),
    ("a new top folder the table does not know", {"ext/m.c": "void m(void) {}\n"}, {},
     ["ext/m.c: in no layer of src/layers.txt"]),
    ("a folder README that does not name a file", {}, {"readme_leaves_out": ["top.h"]},
     ["src/top/README.md: does not name top.h"]),
    ("a front end's folder README that does not name a file", {},
     {"readme_leaves_out": ["main.c"]}, ["app/README.md: does not name main.c"]),
    ("an object of a folder's own target (the extension's) calling a private function", {
        "app/ext/hook.c": "void core_fn(void);\nvoid hook(void) { core_fn(); }\n"},
     {"own_target": ["app/ext/hook.c"]},
     ["call app/ext/hook.c -> src/core/core.c (core_fn): app may not call core"]),
    ("two files of a folder's own target that call each other", {
        "app/ext/a.c": "void b(void);\nvoid a(int n) { if (n) b(); }\n",
        "app/ext/b.c": "void a(int);\nvoid b(void) { a(0); }\n"},
     {"own_target": ["app/ext/a.c", "app/ext/b.c"]},
     ["call circle: app/ext/a.c -> app/ext/b.c (b), app/ext/b.c -> app/ext/a.c (a)"]),
    ("a C file the build did not compile", {"app/ext/x.c": "void x(void) {}\n"},
     {"not_compiled": ["app/ext/x.c"]},
     ["app/ext/x.c: no object under the build, so its calls go unchecked (build it, or name "
      "its folder with --unbuilt)"]),
    ("a folder this build leaves out, named --unbuilt", {"app/ext/x.c": "void x(void) {}\n"},
     {"not_compiled": ["app/ext/x.c"], "unbuilt": ["app/ext/"]}, []),
    ("a circle in the table", {}, {"table": SELF_TABLE.replace("src/core/  ->",
                                                               "src/core/  -> top")},
     ["table: a circle of layers: core -> top"]),
    ("a README that does not quote the table", {}, {"readme": "no table here\n"},
     [f"src/README.md does not quote the table's line {line!r}"
      for line in SELF_TABLE.splitlines() if line and not line.startswith("#")]),
]


def self_test():
    failures = 0
    for title, extra, options, expected in CASES:
        options = dict(options)
        unbuilt = options.pop("unbuilt", ())
        with tempfile.TemporaryDirectory() as base:
            root, build = make_tree(base, {**CLEAN, **extra}, **options)
            problems, _ = check(root, build, unbuilt=unbuilt)
        if sorted(problems) != sorted(expected):
            failures += 1
            print(f"FAIL {title}:\n  expected {expected}\n  got      {problems}")
        else:
            print(f"ok   {title}: {len(problems)} problem(s) found, as expected")
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    args, unbuilt = argv[1:], []
    while len(args) > 2 and args[0] == "--unbuilt":
        unbuilt.append(args[1])
        args = args[2:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems, summary = check(os.path.abspath(args[0]), os.path.abspath(args[1]),
                              unbuilt=unbuilt)
    for p in problems:
        print(p)
    print(f"layers: {summary}: " + (f"{len(problems)} problem(s)" if problems else "all good"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
