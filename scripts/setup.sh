#!/usr/bin/env bash
# Creates .venv (Python 3.11) and installs refiner with the given extras.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if ! command -v uv >/dev/null 2>&1; then
    python3 -m pip install -q uv
fi
if [ ! -x .venv/bin/python ]; then
    uv venv -q -p 3.11 .venv
fi
if [ -n "$extras" ]; then
    uv pip install -q -p .venv/bin/python -e ".[$extras]"
else
    uv pip install -q -p .venv/bin/python -e .
fi
