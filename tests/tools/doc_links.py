"""Every relative link in the README and docs/ resolves: the file exists and, for `#anchor`,
the target page has a heading with that anchor (GitHub's rule: lower case, punctuation
dropped, spaces to hyphens, -1, -2... for repeats).

    python3 tests/tools/doc_links.py SOURCE_DIR        (ctest: doc_links)
    python3 tests/tools/doc_links.py --self-test

Links inside code (fenced blocks, `inline`) are not links and are skipped; http(s) and mailto
links are not fetched."""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """(line number, line with inline code blanked) for the lines outside fenced code."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    text = re.sub(r"`", "", heading.strip().lower())
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            base = slug(m.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def check_file(path, root):
    """The broken links of one Markdown file: 'file:line: target: why'."""
    problems = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            where = f"{os.path.relpath(path, root)}:{n}: {target}"
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file {os.path.relpath(dest, root)}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{where}: {os.path.relpath(dest, root)} has no heading "
                                f"with the anchor #{anchor}")
    return problems


def pages(root):
    out = [os.path.join(root, "README.md"), os.path.join(root, "python", "README.md")]
    docs = os.path.join(root, "docs")
    out += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return [p for p in out if os.path.exists(p)]


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        with open(os.path.join(d, "docs", "a.md"), "w") as f:
            f.write("# A page\n## The `make` commands\n## Twice\n## Twice\n"
                    "```\n# not a heading\n```\n")
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write("[ok](docs/a.md) [ok](docs/a.md#the-make-commands) [ok](docs/a.md#twice-1)\n"
                    "![img](docs/a.md) [web](https://example.com/x) `[code](nowhere.md)`\n"
                    "[bad](docs/b.md) [bad](docs/a.md#not-a-heading) [bad](#nothing)\n"
                    "```\n[in code](nowhere.md)\n```\n")
        problems = [p for page in pages(d) for p in check_file(page, d)]
        want = ["README.md:3: docs/b.md: no such file docs/b.md",
                "README.md:3: docs/a.md#not-a-heading: docs/a.md has no heading with the anchor "
                "#not-a-heading",
                "README.md:3: #nothing: README.md has no heading with the anchor #nothing"]
        if problems != want:
            print("doc_links self-test failed:\n  got " + "\n      ".join(problems))
            return 1
    print("doc_links self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(argv[1] if len(argv) > 1 else ".")
    checked = pages(root)
    problems = [p for page in checked for p in check_file(page, root)]
    for p in problems:
        print(p)
    print(f"doc_links: {len(checked)} pages, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
