#!/usr/bin/env bash
# Creates .venv (Python 3.11) and installs refiner into it with the given extras.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh test
#
# Works with nothing but a system Python 3.11, including an "externally managed" one
# (Debian, Ubuntu) without pip or uv: the venv comes from `python3 -m venv` (when the
# venv module is missing and we are root, apt-get installs python3-venv), and uv is
# installed into the venv. The interpreter is $REFINER_BOOTSTRAP_PYTHON if set, else the
# first Python 3.11 on PATH (python3.11, python3), else uv's (when uv is on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

say() { echo "setup: $*" >&2; }

is_py311() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; }

find_python() {
    if [[ -n "${REFINER_BOOTSTRAP_PYTHON:-}" ]]; then
        echo "$REFINER_BOOTSTRAP_PYTHON"
        return
    fi
    local candidate
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && is_py311 "$(command -v "$candidate")"; then
            command -v "$candidate"
            return
        fi
    done
}

apt_install() {
    if [[ "$(id -u)" != "0" ]] || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    say "installing $* with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

make_venv() {
    local python
    python="$(find_python)"
    if [[ -z "$python" ]]; then
        if command -v uv >/dev/null 2>&1; then
            uv venv -q -p 3.11 .venv
            return
        fi
        say "refiner needs Python 3.11: install it (e.g. apt-get install python3.11 python3.11-venv)"
        say "or point REFINER_BOOTSTRAP_PYTHON at a Python 3.11 interpreter"
        exit 2
    fi
    if ! "$python" -m venv .venv >/dev/null 2>&1; then
        rm -rf .venv  # a venv without pip is left behind when ensurepip is missing
        if ! apt_install python3-venv python3.11-venv || ! "$python" -m venv .venv; then
            rm -rf .venv
            say "$python cannot create a virtualenv: install python3-venv (apt-get install python3-venv)"
            exit 2
        fi
    fi
}

if [[ -n "${REFINER_BOOTSTRAP_PYTHON:-}" ]] && ! is_py311 "$REFINER_BOOTSTRAP_PYTHON"; then
    say "REFINER_BOOTSTRAP_PYTHON=$REFINER_BOOTSTRAP_PYTHON is not a Python 3.11 interpreter"
    exit 2
fi
if ! [[ -x .venv/bin/python ]] || ! is_py311 .venv/bin/python; then
    rm -rf .venv
    make_venv
fi

if command -v uv >/dev/null 2>&1; then
    UV="uv"
else
    UV=".venv/bin/uv"
    if ! [[ -x "$UV" ]]; then
        if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
            .venv/bin/python -m ensurepip -q >/dev/null
        fi
        .venv/bin/python -m pip install -q --disable-pip-version-check uv
    fi
fi

# The system's certificate store, as pip uses (machines behind a TLS-inspecting proxy).
export UV_NATIVE_TLS="${UV_NATIVE_TLS:-1}"
target="."
[[ -n "$extras" ]] && target=".[$extras]"
"$UV" pip install -q -p .venv/bin/python -e "$target"
# Bytecode compiled once here (a no-op when up to date): where PYTHONDONTWRITEBYTECODE is
# set, every process would otherwise compile dagster from source again, seconds each time.
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
.venv/bin/python -m compileall -q -j 0 "$site" >/dev/null 2>&1 || say "some files in $site did not compile (harmless)"
