# scripts/find-python.sh — sourced by the scripts that need a Python of a given version
# (wheel.sh, test-python-versions.sh): `pythonX.Y` on PATH, else pyenv's.
find_python() { # find_python 3.12 -> an interpreter of that version, or nothing
    local v=$1 py
    for py in "python$v" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
        if "$py" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$v'.split('.')))" \
                >/dev/null 2>&1; then
            command -v "$py"
            return
        fi
    done
}
