# Sourced by scripts/test and scripts/demo: the Python half of the setup.
#
# setup_python creates .venv when it is missing and installs the project with
# `pip install -e '.[dev]'` again only when pyproject.toml (or the interpreter)
# changed, so a second run starts at once. Needs only python3 >= 3.11 ($PYTHON).

file_hash() { sha256sum "$@" | sha256sum | cut -c1-64; }

# --- setup: Python ---------------------------------------------------------
PYTHON=${PYTHON:-python3}
venv_python=.venv/bin/python
setup_python() {
    if [ ! -x "$venv_python" ]; then
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
            echo "Turnwire needs Python >= 3.11 as \$PYTHON (got: $("$PYTHON" --version 2>&1))" >&2
            return 1
        }
        "$PYTHON" -m venv .venv || return 1
    fi
    local stamp=.venv/.turnwire-installed wanted
    # The interpreter's version is in the stamp: a rebuilt Python needs a reinstall.
    wanted="$(file_hash pyproject.toml) $("$venv_python" -c 'import sys; print(sys.version)' | head -n 1)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        echo "    .venv is up to date with pyproject.toml"
        return 0
    fi
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv_python" -m pip install --quiet --editable '.[dev]' ||
        return 1
    echo "$wanted" > "$stamp"
}

