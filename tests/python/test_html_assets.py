"""The HTML report's own code: its script and style sheet are real files under
src/analysis/html/, linted with ESLint (Debian's `eslint`, rules in .eslintrc.json there), and
the page the library writes carries them byte for byte (cmake/embed.cmake embeds them)."""
import os
import shutil
import subprocess

import pytest

import stepwatch

SOURCE = os.path.abspath(os.environ.get("SW_SOURCE_DIR",
                                        os.path.join(os.path.dirname(__file__), "..", "..")))
ASSETS = os.path.join(SOURCE, "src", "analysis", "html")


def test_scripts_pass_eslint():
    eslint = shutil.which("eslint")
    if eslint is None:
        pytest.skip("eslint is not installed (apt-get install eslint)")
    env = dict(os.environ)
    # Debian's eslint finds its modules through Debian's node; another node needs the path.
    env["NODE_PATH"] = os.pathsep.join(p for p in ("/usr/share/nodejs", env.get("NODE_PATH"))
                                       if p)
    proc = subprocess.run([eslint, "-f", "compact", "--max-warnings", "0", "."], cwd=ASSETS,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_page_carries_the_files(tmp_path):
    path = tmp_path / "run.db"
    p = stepwatch.Profiler(name="assets", run_file=str(path), live=False)
    for _ in range(3):
        with p.step():
            pass
    p.close()
    page = tmp_path / "run.html"
    stepwatch.html(path, page)
    text = page.read_text()
    for name in ("report.js", "slow.js", "report.css"):
        with open(os.path.join(ASSETS, name), encoding="utf-8") as f:
            body = f.read()
        assert body in text, name
        assert "</script" not in body.lower() and "</style" not in body.lower()
    assert "swFlames = function" not in text  # flame.js only with function profiles


def run_embed(tmp_path, text):
    src, out = tmp_path / "a.js", tmp_path / "out.c"
    src.write_bytes(text.encode())
    proc = subprocess.run([shutil.which("cmake") or "cmake", f"-DOUTPUT={out}",
                           f"-DINPUTS=sw_x={src}", "-P",
                           os.path.join(SOURCE, "cmake", "embed.cmake")],
                          capture_output=True, text=True, timeout=60)
    return proc, out


def test_embed_writes_the_bytes_and_refuses_a_closing_tag(tmp_path):
    text = 'var s = "\\u00b5s";\n// "quotes", \\backslashes\\ and µ\n'
    proc, out = run_embed(tmp_path, text)
    assert proc.returncode == 0, proc.stderr
    c = out.read_text()
    body = c.split("sw_x[] = {", 1)[1].split("}", 1)[0]
    values = [int(v, 16) for v in body.replace("\n", "").split(",") if v]
    assert bytes(values) == text.encode() + b"\0"
    proc, _ = run_embed(tmp_path, 'var s = "</SCRIPT>";\n')
    assert proc.returncode != 0 and "</script" in proc.stderr
